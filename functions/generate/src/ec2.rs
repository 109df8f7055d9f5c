//! The two EC2 reads the generator makes, `DescribeRegions` and `DescribeVpcs`, as EC2 Query
//! calls through the SDK's own runtime (docs/ARCHITECTURE.md, "Reading the members' VPCs"):
//! aws-smithy-runtime's orchestrator gives them the `SdkConfig`'s HTTP client, retries,
//! timeouts and identity cache, aws-runtime signs them with SigV4, and their answers are read
//! with the SDK's XML decoder. Not aws-sdk-ec2: its 700 operations are 88 MB of source, and
//! compiling it took three minutes on one core in every profile, for two calls.
//!
//! A call is the Query form (`Action`, `Version`, its parameters) posted to EC2's regional
//! endpoint, or to `AWS_ENDPOINT_URL` when the `SdkConfig` has one. An error answer is EC2's
//! `<Response><Errors><Error>` document, read into an [`Ec2Error`] whose code and message
//! [`ProvideErrorMetadata`] gives, as an SDK error's would.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use autoproxy::route53::{CallCounter, CountAttempts};

use aws_config::SdkConfig;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_runtime::auth::SigV4OperationSigningConfig;
use aws_runtime::auth::sigv4::{SCHEME_ID, SigV4AuthScheme};
use aws_runtime::retries::classifiers::AwsErrorCodeClassifier;
use aws_smithy_runtime::client::orchestrator::operation::Operation;
use aws_smithy_runtime::client::retries::classifiers::{
    HttpStatusCodeClassifier, TransientErrorClassifier,
};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::auth::AuthSchemeOptionResolverParams;
use aws_smithy_runtime_api::client::auth::static_resolver::StaticAuthSchemeOptionResolver;
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse, OrchestratorError};
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponentsBuilder;
use aws_smithy_runtime_api::client::runtime_plugin::StaticRuntimePlugin;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::Layer;
use aws_smithy_types::error::ErrorMetadata;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;
use aws_smithy_xml::decode::{Document, ScopedDecoder, XmlDecodeError, try_data};
use aws_types::SigningName;
use aws_types::region::{Region, SigningRegion};
use aws_types::service_config::ServiceConfigKey;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// The EC2 API version every call names.
const VERSION: &str = "2016-11-15";
/// What a Query form value escapes: all but RFC 3986's unreserved characters.
const FORM_VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A call's failure as the SDK reports one: a service error holds an [`Ec2Error`].
pub type Ec2Failure = SdkError<Ec2Error, HttpResponse>;

/// EC2 in one region, through one identity.
#[derive(Debug, Clone)]
pub struct Ec2 {
    sdk: SdkConfig,
    region: String,
    credentials: Option<SharedCredentialsProvider>,
    counter: Option<Arc<CallCounter>>,
}

/// EC2's answer to a call it refused or failed: its `Errors` document.
#[derive(Debug)]
pub struct Ec2Error(ErrorMetadata);

impl fmt::Display for Ec2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0.code(), self.0.message()) {
            (Some(code), Some(message)) => write!(f, "{code}: {message}"),
            (Some(code), None) => f.write_str(code),
            (None, _) => f.write_str("an EC2 error without a code"),
        }
    }
}

impl std::error::Error for Ec2Error {}

impl ProvideErrorMetadata for Ec2Error {
    fn meta(&self) -> &ErrorMetadata {
        &self.0
    }
}

/// One VPC block as `DescribeVpcs` lists it: a range and, for an associated block, its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VpcBlock {
    pub cidr: String,
    /// `associated`, `associating`, `disassociating`, `disassociated`, `failing`, `failed`;
    /// none for a VPC's primary `cidrBlock`.
    pub state: Option<String>,
}

/// One page of `DescribeVpcs`: every block of its VPCs, and the token of the next page.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct VpcPage {
    pub blocks: Vec<VpcBlock>,
    pub next_token: Option<String>,
}

impl Ec2 {
    /// EC2 in `region` for `sdk`'s settings, through `credentials` when given (a member's
    /// role), else the `SdkConfig`'s own.
    pub fn new(
        sdk: &SdkConfig,
        region: &str,
        credentials: Option<SharedCredentialsProvider>,
    ) -> Self {
        Ec2 {
            sdk: sdk.clone(),
            region: region.to_owned(),
            credentials,
            counter: None,
        }
    }

    /// Every attempt of every call is counted in `counter`, retries included.
    #[must_use]
    pub fn counting(mut self, counter: Arc<CallCounter>) -> Self {
        self.counter = Some(counter);
        self
    }

    /// The regions enabled in the caller's account (`DescribeRegions`, one call).
    pub async fn regions(&self) -> Result<Vec<String>, Ec2Failure> {
        self.call("DescribeRegions", &[], parse_regions).await
    }

    /// One page of the VPCs the caller owns or has shared with it: up to `max` VPCs, after
    /// the page `token` ends.
    pub async fn vpc_page(&self, max: u16, token: Option<&str>) -> Result<VpcPage, Ec2Failure> {
        let max = max.to_string();
        let mut params = vec![("MaxResults", max.as_str())];
        if let Some(token) = token {
            params.push(("NextToken", token));
        }
        self.call("DescribeVpcs", &params, parse_vpc_page).await
    }

    /// Any call: `action` with `params` (Query names, as EC2's API reference gives them), its
    /// answer read by `parse`. A body `parse` cannot read is a response error.
    pub async fn call<O>(
        &self,
        action: &'static str,
        params: &[(&str, &str)],
        parse: fn(&str) -> Result<O, XmlDecodeError>,
    ) -> Result<O, Ec2Failure>
    where
        O: fmt::Debug + Send + Sync + 'static,
    {
        let form = query_form(action, params);
        self.operation(action, parse).invoke(form).await
    }

    fn operation<O>(
        &self,
        action: &'static str,
        parse: fn(&str) -> Result<O, XmlDecodeError>,
    ) -> Operation<String, O, Ec2Error>
    where
        O: fmt::Debug + Send + Sync + 'static,
    {
        let endpoint = self.endpoint();
        let mut builder = Operation::builder()
            .service_name("ec2")
            .operation_name(action)
            .endpoint_url(&endpoint)
            .standard_retry(
                &self
                    .sdk
                    .retry_config()
                    .cloned()
                    .unwrap_or_else(RetryConfig::standard),
            )
            .retry_classifier(AwsErrorCodeClassifier::<Ec2Error>::new())
            .retry_classifier(TransientErrorClassifier::<Ec2Error>::new())
            .retry_classifier(HttpStatusCodeClassifier::default())
            .timeout_config(
                self.sdk
                    .timeout_config()
                    .cloned()
                    .unwrap_or_else(TimeoutConfig::disabled),
            )
            .runtime_plugin(self.signing());
        if let Some(version) = self.sdk.behavior_version() {
            builder = builder.behavior_version(version);
        }
        if let Some(client) = self.sdk.http_client() {
            builder = builder.http_client(client);
        }
        if let Some(sleep) = self.sdk.sleep_impl() {
            builder = builder.sleep_impl(sleep);
        }
        if let Some(time) = self.sdk.time_source() {
            builder = builder.time_source(time);
        }
        if let Some(stalls) = self.sdk.stalled_stream_protection() {
            builder = builder.stalled_stream_protection(stalls);
        }
        if let Some(counter) = &self.counter {
            builder = builder.interceptor(CountAttempts(counter.clone()));
        }
        builder
            .serializer(move |form: String| {
                let mut request = HttpRequest::new(SdkBody::from(form));
                request.set_method("POST")?;
                request.set_uri("/")?;
                request.headers_mut().insert(
                    "content-type",
                    "application/x-www-form-urlencoded; charset=utf-8",
                );
                Ok(request)
            })
            .deserializer(move |response: &HttpResponse| read_answer(response, parse))
            .build()
    }

    /// SigV4 for EC2 in this region, through this identity: the auth scheme, the signing
    /// name and region, and the identity cache the `SdkConfig`'s clients share.
    fn signing(&self) -> StaticRuntimePlugin {
        let mut config = Layer::new("autoproxy::ec2 signing");
        config.store_put(AuthSchemeOptionResolverParams::new(()));
        config.store_put(SigV4OperationSigningConfig {
            region: Some(SigningRegion::from(Region::new(self.region.clone()))),
            name: Some(SigningName::from_static("ec2")),
            ..SigV4OperationSigningConfig::default()
        });
        let mut components = RuntimeComponentsBuilder::new("autoproxy::ec2 signing")
            .with_auth_scheme_option_resolver(Some(StaticAuthSchemeOptionResolver::new(vec![
                SCHEME_ID,
            ])))
            .with_auth_scheme(SigV4AuthScheme::new());
        let identity = self
            .credentials
            .clone()
            .or_else(|| self.sdk.credentials_provider());
        if let Some(identity) = identity {
            components = components.with_identity_resolver(SCHEME_ID, identity);
        }
        if let Some(cache) = self.sdk.identity_cache() {
            components = components.with_identity_cache(Some(cache));
        }
        StaticRuntimePlugin::new()
            .with_config(config.freeze())
            .with_runtime_components(components)
    }

    /// The endpoint an SDK client of EC2 would use: the `SdkConfig`'s own when set in code,
    /// else `AWS_ENDPOINT_URL_EC2` (or the profile's), else `AWS_ENDPOINT_URL`, else EC2's
    /// regional endpoint (FIPS when the `SdkConfig` asks for it; China's regions in their own
    /// domain).
    fn endpoint(&self) -> String {
        let for_ec2 = if self.sdk.get_origin("endpoint_url").is_client_config() {
            None
        } else {
            let key = ServiceConfigKey::builder()
                .service_id("EC2")
                .env("AWS_ENDPOINT_URL")
                .profile("endpoint_url")
                .build()
                .ok();
            self.sdk
                .service_config()
                .zip(key)
                .and_then(|(config, key)| config.load_config(key))
        };
        if let Some(url) = for_ec2.or_else(|| self.sdk.endpoint_url().map(str::to_owned)) {
            return url;
        }
        let host = if self.sdk.use_fips() == Some(true) {
            "ec2-fips"
        } else {
            "ec2"
        };
        let domain = if self.region.starts_with("cn-") {
            "amazonaws.com.cn"
        } else {
            "amazonaws.com"
        };
        format!("https://{host}.{}.{domain}", self.region)
    }
}

/// The Query form of `action` with `params`.
fn query_form(action: &str, params: &[(&str, &str)]) -> String {
    [("Action", action), ("Version", VERSION)]
        .iter()
        .chain(params)
        .map(|(name, value)| format!("{name}={}", utf8_percent_encode(value, FORM_VALUE)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A 2xx answer read by `parse`; any other, EC2's error document.
fn read_answer<O>(
    response: &HttpResponse,
    parse: fn(&str) -> Result<O, XmlDecodeError>,
) -> Result<O, OrchestratorError<Ec2Error>> {
    let body = response.body().bytes().unwrap_or_default();
    let text = std::str::from_utf8(body).map_err(|err| OrchestratorError::response(err.into()))?;
    if response.status().is_success() {
        return parse(text).map_err(|err| OrchestratorError::response(BoxError::from(err)));
    }
    let metadata = parse_error(text).unwrap_or_else(|_| ErrorMetadata::builder().build());
    Err(OrchestratorError::operation(Ec2Error(metadata)))
}

/// Each child element of `scope`, with its decoder: `visit` reads the ones it names.
fn each_child<'inp>(
    scope: &mut ScopedDecoder<'inp, '_>,
    mut visit: impl FnMut(&str, &mut ScopedDecoder<'inp, '_>) -> Result<(), XmlDecodeError>,
) -> Result<(), XmlDecodeError> {
    while let Some(mut child) = scope.next_tag() {
        let name = child.start_el().local().to_owned();
        visit(&name, &mut child)?;
    }
    Ok(())
}

/// The document's root element, which must be `expected`: an answer from anything but EC2 (a
/// proxy's page, a stand-in's) is an error, never an empty list.
fn root<'inp, 'a>(
    document: &'a mut Document<'inp>,
    expected: &str,
) -> Result<ScopedDecoder<'inp, 'a>, XmlDecodeError> {
    let root = document.root_element()?;
    if root.start_el().local() == expected {
        Ok(root)
    } else {
        Err(XmlDecodeError::custom(format!(
            "expected EC2's {expected}, got <{}>",
            root.start_el().local()
        )))
    }
}

fn text(scope: &mut ScopedDecoder<'_, '_>) -> Result<String, XmlDecodeError> {
    try_data(scope).map(Cow::into_owned)
}

/// `DescribeRegionsResponse`: each `regionInfo` item's `regionName`.
fn parse_regions(body: &str) -> Result<Vec<String>, XmlDecodeError> {
    let mut document = Document::new(body);
    let mut root = root(&mut document, "DescribeRegionsResponse")?;
    let mut names = Vec::new();
    each_child(&mut root, |name, info| {
        if name != "regionInfo" {
            return Ok(());
        }
        each_child(info, |_, item| {
            each_child(item, |name, field| {
                if name == "regionName" {
                    names.push(text(field)?);
                }
                Ok(())
            })
        })
    })?;
    Ok(names)
}

/// `DescribeVpcsResponse`: each VPC's primary `cidrBlock` and its IPv4 and IPv6 association
/// sets, and the `nextToken`.
fn parse_vpc_page(body: &str) -> Result<VpcPage, XmlDecodeError> {
    let mut document = Document::new(body);
    let mut root = root(&mut document, "DescribeVpcsResponse")?;
    let mut page = VpcPage::default();
    each_child(&mut root, |name, field| {
        match name {
            "nextToken" => page.next_token = Some(text(field)?).filter(|t| !t.is_empty()),
            "vpcSet" => each_child(field, |_, vpc| {
                each_child(vpc, |name, field| {
                    match name {
                        "cidrBlock" => page.blocks.push(VpcBlock {
                            cidr: text(field)?,
                            state: None,
                        }),
                        "cidrBlockAssociationSet" | "ipv6CidrBlockAssociationSet" => {
                            each_child(field, |_, item| {
                                page.blocks.extend(association(item)?);
                                Ok(())
                            })?;
                        }
                        _ => {}
                    }
                    Ok(())
                })
            })?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(page)
}

/// One item of a VPC's association set: its block (`cidrBlock` or `ipv6CidrBlock`) and the
/// `state` of its `cidrBlockState` or `ipv6CidrBlockState`.
fn association(item: &mut ScopedDecoder<'_, '_>) -> Result<Option<VpcBlock>, XmlDecodeError> {
    let (mut cidr, mut state) = (None, None);
    each_child(item, |name, field| {
        match name {
            "cidrBlock" | "ipv6CidrBlock" => cidr = Some(text(field)?),
            "cidrBlockState" | "ipv6CidrBlockState" => each_child(field, |name, field| {
                if name == "state" {
                    state = Some(text(field)?);
                }
                Ok(())
            })?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(cidr.map(|cidr| VpcBlock { cidr, state }))
}

/// EC2's error document: `Response/Errors/Error`'s `Code` and `Message`, and `RequestID`.
fn parse_error(body: &str) -> Result<ErrorMetadata, XmlDecodeError> {
    let mut document = Document::new(body);
    let mut root = root(&mut document, "Response")?;
    let (mut code, mut message, mut request) = (None, None, None);
    each_child(&mut root, |name, field| {
        match name {
            "Errors" => each_child(field, |_, item| {
                each_child(item, |name, field| {
                    match name {
                        "Code" => code = Some(text(field)?),
                        "Message" => message = Some(text(field)?),
                        _ => {}
                    }
                    Ok(())
                })
            })?,
            "RequestID" => request = Some(text(field)?),
            _ => {}
        }
        Ok(())
    })?;
    let mut error = ErrorMetadata::builder();
    if let Some(code) = code {
        error = error.code(code);
    }
    if let Some(message) = message {
        error = error.message(message);
    }
    if let Some(request) = request {
        error = error.custom("aws_request_id", request);
    }
    Ok(error.build())
}
