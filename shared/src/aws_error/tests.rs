use aws_sdk_s3::error::ErrorMetadata;
use aws_sdk_ssm::error::ConnectorError;
use aws_sdk_ssm::operation::describe_instance_information::DescribeInstanceInformationError as Error;
use aws_smithy_types::body::SdkBody;

use super::*;

fn response(status: u16, body: &str) -> HttpResponse {
    HttpResponse::new(
        status.try_into().expect("a status code"),
        SdkBody::from(body.to_owned()),
    )
}

fn service(code: Option<&str>, message: Option<&str>, status: u16) -> SdkError<Error> {
    let mut meta = ErrorMetadata::builder();
    if let Some(code) = code {
        meta = meta.code(code);
    }
    if let Some(message) = message {
        meta = meta.message(message);
    }
    SdkError::service_error(Error::generic(meta.build()), response(status, "{}"))
}

/// moto's answer to a call it does not implement: HTTP 500 and an HTML page.
const HTML: &str = "<!doctype html>\n<html lang=en>\n<title>500 Internal Server Error</title>\n\
    <h1>Internal Server Error</h1>\n<p>The server encountered an internal error.</p>\n";

/// An XML error where the protocol is JSON (moto's IAM refusals).
const XML: &str = "<ErrorResponse><Error><Code>AccessDenied</Code>\n<Message>User: moto is not \
    authorized to perform ssm:DescribeInstanceInformation</Message></Error></ErrorResponse>";

#[test]
fn each_kind_of_failure_is_one_line_saying_why() {
    let check = |err: SdkError<Error>, expected: &str| {
        let line = reason(&err);
        assert_eq!(line, expected);
        assert!(!line.contains('\n'), "{line:?}");
    };
    check(
        service(
            Some("AccessDeniedException"),
            Some("User: arn:aws:sts::1:assumed-role/r is not authorized\n to perform it"),
            400,
        ),
        "AccessDeniedException: User: arn:aws:sts::1:assumed-role/r \
         is not authorized to perform it",
    );
    check(
        service(Some("ThrottlingException"), None, 400),
        "ThrottlingException",
    );
    check(
        SdkError::service_error(
            Error::generic(ErrorMetadata::builder().build()),
            response(502, ""),
        ),
        "HTTP 502, not an AWS error, with no body",
    );
    check(
        SdkError::response_error(
            std::io::Error::other("malformed JSON error body: unexpected token '<'"),
            response(500, HTML),
        ),
        "HTTP 500, not an AWS error: 500 Internal Server Error \
         Internal Server Error The server encountered an internal error.",
    );
    check(
        SdkError::response_error(
            std::io::Error::other("failed to parse the error"),
            response(403, XML),
        ),
        "HTTP 403, not an AWS error: AccessDenied User: moto is \
         not authorized to perform ssm:DescribeInstanceInformation",
    );
    check(
        SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "tcp connect error: Connection refused (os error 111)",
        )))),
        "no answer: io error: tcp connect error: Connection refused \
         (os error 111)",
    );
    check(
        SdkError::timeout_error(std::io::Error::other("operation timeout (all attempts)")),
        "no answer in time (timed out)",
    );
    check(
        SdkError::construction_failure(std::io::Error::other("no region configured")),
        "the request could not be made: no region configured",
    );
}

#[test]
fn a_long_reason_is_cut() {
    let err = service(Some("ValidationException"), Some(&"x".repeat(2_000)), 400);
    let line = reason(&err);
    assert!(line.len() < 400, "{} bytes", line.len());
    assert!(line.ends_with('…'), "{line}");
}
