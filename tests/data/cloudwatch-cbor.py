"""CloudWatch for the Rust SDK in tests: moto serves CloudWatch's query and JSON protocols,
while aws-sdk-cloudwatch speaks only Smithy RPC v2 CBOR (POST
/service/GraniteServiceVersion20100801/operation/<Operation>). This stand-in decodes such a
request with botocore's CBOR parser, makes the same call to moto with boto3 (as the caller:
its access key id from the Authorization header, its secret from KEYS, so moto's IAM
enforcement sees the same principal), and answers in CBOR: an empty map, or moto's error as
{"__type", "message"} with moto's status.

Usage: python cloudwatch-cbor.py <moto endpoint> <port> [KEYS as JSON {"id": "secret"}]
Runs with the moto venv's Python (boto3, botocore). Prints "listening" once it listens.
"""

import io
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import botocore.config
import botocore.exceptions
from botocore.parsers import RpcV2CBORParser

MOTO = sys.argv[1]
PORT = int(sys.argv[2])
KEYS = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
PATH = re.compile(r"/service/GraniteServiceVersion20100801/operation/(\w+)")


def text(value):
    """A CBOR text string."""
    data = value.encode()
    if len(data) < 24:
        return bytes([0x60 | len(data)]) + data
    if len(data) < 256:
        return bytes([0x78, len(data)]) + data
    return bytes([0x79]) + len(data).to_bytes(2, "big") + data[:65535]


CLIENTS = {}
LOCK = threading.Lock()


def client_for(key):
    """One boto3 client per access key (making one takes a few hundred ms)."""
    with LOCK:
        if key not in CLIENTS:
            CLIENTS[key] = boto3.client(
                "cloudwatch",
                endpoint_url=MOTO,
                region_name="us-east-1",
                aws_access_key_id=key,
                aws_secret_access_key=KEYS.get(key, "testing"),
                config=botocore.config.Config(retries={"max_attempts": 1}),
            )
        return CLIENTS[key]


def snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "application/cbor")
        self.send_header("smithy-protocol", "rpc-v2-cbor")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        match = PATH.fullmatch(self.path)
        if not match:
            return self.answer(404, b"\xa2" + text("__type") + text("UnknownOperation")
                               + text("message") + text(self.path))
        parser = RpcV2CBORParser()
        params = parser.parse_data_item(parser.get_peekable_stream_from_bytes(body)) if body else {}
        found = re.search(r"Credential=([^/]+)/", self.headers.get("Authorization", ""))
        client = client_for(found.group(1) if found else "testing")
        try:
            getattr(client, snake(match.group(1)))(**params)
        except botocore.exceptions.ClientError as err:
            error = err.response.get("Error", {})
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 400)
            return self.answer(status, b"\xa2" + text("__type") + text(error.get("Code", "Error"))
                               + text("message") + text(error.get("Message", "")))
        except Exception as err:  # moto gone, or a call it cannot take: the SDK sees a 503
            return self.answer(503, b"\xa2" + text("__type") + text("ServiceUnavailable")
                               + text("message") + text(str(err)))
        self.answer(200, b"\xa0")


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print("listening", flush=True)
server.serve_forever()
