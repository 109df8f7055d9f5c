#!/usr/bin/env python3
"""A stand-in for a Kubernetes API server's watch, for the data-plane benchmark.

Usage: watch-apiserver.py <ip> <port> <cert.pem> <key.pem>

TLS on <ip>:<port> (HTTP/1.1 only); `GET /version` answers a server version, every other GET
200 with a chunked JSON body of one watch event (a BOOKMARK) every 100 ms that never ends on
its own, as a watch does. SIGTERM
ends every stream cleanly (the final chunk), so a client that was never cut exits 0 having
read every event.
"""
import http.server
import json
import signal
import ssl
import sys
import threading

ip, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
stop = threading.Event()


class Watch(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        if self.path.startswith("/version"):
            # Asked first by kubectl's version dispatcher (gcloud's kubectl picks the client
            # matching the server's minor version).
            body = json.dumps({"major": "1", "minor": "32", "gitVersion": "v1.32.4"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        version = 0
        while not stop.is_set():
            event = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                                   "metadata": {"resourceVersion": str(version)}}}
            data = (json.dumps(event) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            except OSError:
                return
            version += 1
            stop.wait(0.1)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer((ip, port), Watch)
server.daemon_threads = False
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
context.set_alpn_protocols(["http/1.1"])
server.socket = context.wrap_socket(server.socket, server_side=True)


def end(*_):
    stop.set()
    threading.Thread(target=server.shutdown).start()


signal.signal(signal.SIGTERM, end)
print("listening", flush=True)
server.serve_forever()
server.server_close()
