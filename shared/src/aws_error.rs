//! AWS errors as a person reads them: why a call failed, on one line, beside the call its
//! caller names.
//!
//! The SDK's `DisplayErrorContext` writes every error of the chain and then the whole error's
//! `Debug`: an endpoint's HTML body, hyper's connector internals, the retry classifier. That
//! belongs in a debugger, not in a fleet report, a command's output or a Lambda error. Here:
//! AWS's error code and message when AWS answered with one; else the HTTP status and the text
//! (markup removed, cut short) of an answer that was not an AWS error; else what kept the call from an answer (a timeout, a refused
//! connection, credentials), each error of the chain once, on one line.

use aws_sdk_s3::config::http::HttpResponse;
// The one `SdkError` and `ProvideErrorMetadata` every SDK crate re-exports: this serves the
// errors of all of them.
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

/// How long the reason may be: one line of a log or a table, never a page.
const MAX_REASON_BYTES: usize = 300;

/// Why the call failed, on one line (see the module's doc): for example
/// `AccessDeniedException: User … is not authorized to perform ssm:DescribeInstanceInformation`
/// or `no answer: connection refused`. The caller names the call.
pub fn reason<E>(err: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let status = err.raw_response().map(|r| u16::from(r.status()));
    let text = match (err, err.code(), status) {
        (_, Some(code), _) => match err.message().map(str::trim) {
            Some(message) if !message.is_empty() => format!("{code}: {message}"),
            _ => code.to_owned(),
        },
        (SdkError::ServiceError(_) | SdkError::ResponseError(_), None, Some(status)) => {
            let body = err.raw_response().map(body_text).unwrap_or_default();
            if body.is_empty() {
                format!("HTTP {status}, not an AWS error, with no body")
            } else {
                format!("HTTP {status}, not an AWS error: {body}")
            }
        }
        (SdkError::TimeoutError(_), ..) => "no answer in time (timed out)".to_owned(),
        (SdkError::DispatchFailure(_), ..) => format!("no answer: {}", causes(err)),
        (SdkError::ConstructionFailure(_), ..) => {
            format!("the request could not be made: {}", causes(err))
        }
        _ => causes(err),
    };
    crate::excerpt(&single_line(&text), MAX_REASON_BYTES)
}

/// The messages of the error's sources, from the outermost to the root cause, each once (an
/// error often repeats its source's message in its own).
fn causes(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = err.source();
    while let Some(cause) = next {
        let text = single_line(&cause.to_string());
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.retain(|p| !text.contains(p.as_str()));
            parts.push(text);
        }
        next = cause.source();
    }
    if parts.is_empty() {
        single_line(&err.to_string())
    } else {
        parts.join(": ")
    }
}

/// What an answer that is not an AWS error says, for a person: its text without markup (an
/// HTML page's title and heading, an XML error's code and message), cut short.
fn body_text(response: &HttpResponse) -> String {
    let raw = String::from_utf8_lossy(response.body().bytes().unwrap_or_default());
    let mut text = String::with_capacity(raw.len());
    let mut in_tag = false;
    for c in raw.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                text.push(' ');
            }
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    crate::excerpt(&single_line(&text), MAX_BODY_BYTES)
}

/// How much of such a body is shown.
const MAX_BODY_BYTES: usize = 160;

/// Whitespace runs, newlines included, as one space.
fn single_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
