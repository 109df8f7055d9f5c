//! The generator's EC2 Query calls through the SDK's runtime, against an HTTP client that
//! answers as EC2 does and keeps each request: what is sent (the form, the endpoint, the
//! SigV4 signature), how pages follow, what is retried and counted, and how EC2's errors and
//! unreadable answers come back. moto answers the same calls in `borders.rs`; this is what
//! moto does not check.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use autoproxy::discovery::Scope;
use autoproxy::route53::CallCounter;
use autoproxy::settings::MemberRegions;
use autoproxy_generate::ec2::Ec2;
use autoproxy_generate::vpcs::VpcReader;
use aws_config::retry::RetryConfig;
use aws_sdk_route53::error::{ProvideErrorMetadata, SdkError};

use super::borders::{ranges_of, sdk_answered_by};
use super::*;

/// What a request carried: its URI, its headers by name, its form.
#[derive(Debug, Clone)]
struct Sent {
    uri: String,
    authorization: String,
    content_type: String,
    form: String,
}

/// EC2 answering each request with `answer(form, attempt)` (status and body), every request
/// kept.
fn ec2_answering_with(
    answer: impl Fn(&str, usize) -> (u16, String) + Send + Sync + 'static,
) -> (SdkConfig, Arc<Mutex<Vec<Sent>>>) {
    let sent = Arc::new(Mutex::new(Vec::<Sent>::new()));
    let kept = sent.clone();
    let client = aws_smithy_http_client::test_util::infallible_client_fn(move |request| {
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let form = String::from_utf8_lossy(request.body().bytes().unwrap_or_default()).into_owned();
        let mut sent = kept.lock().unwrap();
        sent.push(Sent {
            uri: request.uri().to_string(),
            authorization: header("authorization"),
            content_type: header("content-type"),
            form: form.clone(),
        });
        let (status, body) = answer(&form, sent.len());
        http::Response::builder().status(status).body(body).unwrap()
    });
    (sdk_answered_by(client), sent)
}

const REGIONS: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><DescribeRegionsResponse \
    xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r-1</requestId><regionInfo>\
    <item><regionName>eu-west-1</regionName><regionEndpoint>ec2.eu-west-1.amazonaws.com\
    </regionEndpoint><optInStatus>opt-in-not-required</optInStatus></item><item><regionName>\
    us-east-1</regionName><regionEndpoint>ec2.us-east-1.amazonaws.com</regionEndpoint>\
    </item></regionInfo></DescribeRegionsResponse>";

fn ec2_error(code: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>{code}</Code>\
         <Message>not this time</Message></Error></Errors><RequestID>r-9</RequestID></Response>"
    )
}

/// A `DescribeVpcs` page of one VPC of `cidr`, an associated block and a disassociated one,
/// and `next`'s token.
fn vpc_page(cidr: &str, next: Option<&str>) -> String {
    let next = next.map_or(String::new(), |t| format!("<nextToken>{t}</nextToken>"));
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><DescribeVpcsResponse \
         xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r-2</requestId><vpcSet>\
         <item><vpcId>vpc-1</vpcId><cidrBlock>{cidr}</cidrBlock><cidrBlockAssociationSet><item>\
         <associationId>a-1</associationId><cidrBlock>{cidr}</cidrBlock><cidrBlockState><state>\
         associated</state></cidrBlockState></item><item><associationId>a-2</associationId>\
         <cidrBlock>10.99.0.0/16</cidrBlock><cidrBlockState><state>disassociated</state>\
         </cidrBlockState></item></cidrBlockAssociationSet><ipv6CidrBlockAssociationSet><item>\
         <ipv6CidrBlock>2600:1f18:ab:cd00::/56</ipv6CidrBlock><ipv6CidrBlockState><state>\
         associated</state></ipv6CidrBlockState></item></ipv6CidrBlockAssociationSet></item>\
         </vpcSet>{next}</DescribeVpcsResponse>"
    )
}

#[tokio::test]
async fn a_call_is_a_sigv4_signed_query_form_posted_to_the_regional_endpoint() {
    let (sdk, sent) = ec2_answering_with(|_, _| (200, vpc_page("10.5.0.0/16", None)));
    // The harness's SdkConfig names no endpoint: EC2's own is used.
    let page = Ec2::new(&sdk, "eu-west-1", None)
        .vpc_page(1000, Some("a/b=c d"))
        .await
        .unwrap();
    assert_eq!(page.next_token, None);
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 1);
    let request = &sent[0];
    assert_eq!(request.uri, "https://ec2.eu-west-1.amazonaws.com/");
    assert_eq!(
        request.form,
        "Action=DescribeVpcs&Version=2016-11-15&MaxResults=1000&NextToken=a%2Fb%3Dc%20d"
    );
    assert_eq!(
        request.content_type,
        "application/x-www-form-urlencoded; charset=utf-8"
    );
    assert!(
        request
            .authorization
            .starts_with("AWS4-HMAC-SHA256 Credential=AKIDTEST/")
            && request
                .authorization
                .contains("/eu-west-1/ec2/aws4_request, SignedHeaders="),
        "{}",
        request.authorization
    );
}

#[tokio::test]
async fn a_throttled_call_is_retried_and_every_attempt_is_counted() {
    let (sdk, sent) = ec2_answering_with(|_, attempt| match attempt {
        1 => (503, ec2_error("RequestLimitExceeded")),
        2 => (500, ec2_error("InternalError")),
        _ => (200, REGIONS.to_owned()),
    });
    let retrying = RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(1));
    let sdk = sdk.to_builder().retry_config(retrying).build();
    let counter = Arc::new(CallCounter::default());
    let regions = Ec2::new(&sdk, "us-east-1", None)
        .counting(counter.clone())
        .regions()
        .await
        .unwrap();
    assert_eq!(regions, ["eu-west-1", "us-east-1"]);
    assert_eq!(counter.attempts(), 3);
    assert_eq!(sent.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_refusal_comes_back_as_ec2s_code_and_message_and_is_not_retried() {
    let (sdk, sent) = ec2_answering_with(|_, _| (403, ec2_error("UnauthorizedOperation")));
    let sdk = sdk
        .to_builder()
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .build();
    let err = Ec2::new(&sdk, "us-east-1", None)
        .regions()
        .await
        .unwrap_err();
    assert!(matches!(err, SdkError::ServiceError(_)), "{err:?}");
    assert_eq!(err.code(), Some("UnauthorizedOperation"));
    assert_eq!(err.message(), Some("not this time"));
    assert_eq!(
        autoproxy::aws_error::reason(&err),
        "UnauthorizedOperation: not this time"
    );
    assert_eq!(sent.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn an_answer_that_is_not_ec2s_is_a_response_error() {
    let (sdk, _) = ec2_answering_with(|_, _| (200, "<html>a captive portal</html".to_owned()));
    let err = Ec2::new(&sdk, "us-east-1", None)
        .regions()
        .await
        .unwrap_err();
    assert!(matches!(err, SdkError::ResponseError(_)), "{err:?}");
}

#[tokio::test]
async fn a_members_vpcs_are_read_page_after_page_until_no_token_comes() {
    // Two pages in the proxies' region (10.5/16, then 10.6/16), none past them.
    let (sdk, sent) = ec2_answering_with(|form, _| {
        if form.contains("NextToken=page-2") {
            (200, vpc_page("10.6.0.0/16", None))
        } else {
            (200, vpc_page("10.5.0.0/16", Some("page-2")))
        }
    });
    let account = AccountRoute53::new(MEMBER_A, &aws_sdk_route53::Config::from(&sdk), 5.0);
    let reader = VpcReader::new(
        &sdk,
        vec!["us-east-1".into()],
        MemberRegions::Listed(Vec::new()),
        None,
    );
    let learned = reader.learn(&Scope::Full, None, &[account], None).await;
    assert_eq!(
        ranges_of(&learned, MEMBER_A),
        ["10.5.0.0/16", "10.6.0.0/16", "2600:1f18:ab:cd00::/56"],
        "the disassociated 10.99.0.0/16 is no network"
    );
    assert_eq!(learned.calls, 2);
    let forms: Vec<String> = sent
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.form.clone())
        .collect();
    assert_eq!(
        forms,
        [
            "Action=DescribeVpcs&Version=2016-11-15&MaxResults=1000",
            "Action=DescribeVpcs&Version=2016-11-15&MaxResults=1000&NextToken=page-2",
        ]
    );
}
