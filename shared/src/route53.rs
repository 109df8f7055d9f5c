//! The only Route53 I/O: listing private zones and reading their record sets, one account at a
//! time, paced under the account's request limit and counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_route53::Client;
use aws_sdk_route53::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_route53::config::{ConfigBag, Intercept, RuntimeComponents, SharedCredentialsProvider};
use aws_sdk_route53::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_route53::operation::get_hosted_zone::GetHostedZoneError;
use aws_sdk_route53::operation::list_resource_record_sets::ListResourceRecordSetsError;
use aws_sdk_route53::types::{ResourceRecordSet, RrType, VpcRegion};

use crate::model::{RecordSet, Zone, ZoneKey, ZoneRecords};
use crate::ratelimit::{Permit, RateLimiter};
use crate::rules::{Rule, Sieve};
use crate::settings::ProxyVpc;

/// Route53's page sizes: the most it returns per call.
pub const ZONES_PER_PAGE: i32 = 100;
pub const RECORDS_PER_PAGE: i32 = 300;

/// A Route53 call that failed (after the SDK's retries).
#[derive(Debug, thiserror::Error)]
#[error("account {account}: {operation} failed: {message}")]
pub struct ScanError {
    pub account: String,
    pub operation: &'static str,
    pub message: String,
    /// STS refused the account's role (AccessDenied before any Route53 answer): the role does
    /// not exist, or does not trust the generator. History tells a member never onboarded
    /// from one whose role broke (see `accounts`).
    pub assume_denied: bool,
}

/// Counts every HTTP attempt a client makes (retries included): the real cost in Route53's
/// request budget.
#[derive(Debug, Default)]
pub struct CallCounter {
    attempts: AtomicU64,
}

impl CallCounter {
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }
}

/// The interceptor behind [`CallCounter`], for any SDK client (Organizations' too).
#[derive(Debug)]
pub struct CountAttempts(pub Arc<CallCounter>);

impl Intercept for CountAttempts {
    fn name(&self) -> &'static str {
        "autoproxy::CountAttempts"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.0.attempts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// One account's Route53, paced and counted.
#[derive(Debug, Clone)]
pub struct AccountRoute53 {
    pub account: String,
    client: Client,
    limiter: Arc<RateLimiter>,
    counter: Arc<CallCounter>,
    operations: Arc<AtomicU64>,
    credentials: Option<SharedCredentialsProvider>,
}

impl AccountRoute53 {
    /// Wraps a client configured with this account's credentials.
    pub fn new(account: &str, config: &aws_sdk_route53::Config, requests_per_second: f64) -> Self {
        let counter = Arc::new(CallCounter::default());
        let config = config
            .to_builder()
            .interceptor(CountAttempts(counter.clone()))
            .build();
        AccountRoute53 {
            account: account.to_owned(),
            client: Client::from_conf(config),
            limiter: Arc::new(RateLimiter::per_second(requests_per_second)),
            counter,
            operations: Arc::new(AtomicU64::new(0)),
            credentials: None,
        }
    }

    /// Says which credentials the client was built with (its account's assumed role), so
    /// that another service's client can share them: with the same provider, the same cache,
    /// and so the one `AssumeRole`.
    #[must_use]
    pub fn with_credentials(mut self, credentials: SharedCredentialsProvider) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// The credentials given by [`AccountRoute53::with_credentials`]; `None`: the function's
    /// own.
    pub fn credentials(&self) -> Option<&SharedCredentialsProvider> {
        self.credentials.as_ref()
    }

    /// HTTP attempts made so far (retries included).
    pub fn calls(&self) -> u64 {
        self.counter.attempts()
    }

    /// Attempts beyond one per operation: retries after throttling or transient errors.
    pub fn retries(&self) -> u64 {
        self.calls()
            .saturating_sub(self.operations.load(Ordering::Relaxed))
    }

    /// Waits for the account's next slot; the permit must live until the call's answer is in
    /// (see `ratelimit`). SDK retries happen inside that call and are not paced separately.
    async fn pace(&self) -> Permit<'_> {
        let permit = self.limiter.acquire().await;
        self.operations.fetch_add(1, Ordering::Relaxed);
        permit
    }

    // By value: every caller hands over the error it is done with (`map_err`).
    #[allow(clippy::needless_pass_by_value)]
    fn error<E>(&self, operation: &'static str, err: SdkError<E>) -> ScanError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        // No HTTP answer from Route53: the credentials (the assumed role) failed first. Their
        // error is somewhere in the whole chain, which the one-line message may shorten.
        let no_answer = err.raw_response().is_none();
        let denied = DisplayErrorContext(&err)
            .to_string()
            .contains("AccessDenied");
        ScanError {
            account: self.account.clone(),
            operation,
            assume_denied: no_answer && denied,
            message: crate::aws_error::reason(&err),
        }
    }

    /// A page that says more follows but not where: what was read is incomplete, and a partial
    /// list taken as whole would drop routes.
    fn incomplete(&self, operation: &'static str, message: &str) -> ScanError {
        ScanError {
            account: self.account.clone(),
            operation,
            message: message.to_owned(),
            assume_denied: false,
        }
    }

    /// Every hosted zone of the account, private and public, 100 a page.
    pub async fn list_zones(&self) -> Result<(Vec<Zone>, u32), ScanError> {
        let mut zones = Vec::new();
        let mut marker: Option<String> = None;
        let mut pages = 0;
        loop {
            let permit = self.pace().await;
            let page = self
                .client
                .list_hosted_zones()
                .max_items(ZONES_PER_PAGE)
                .set_marker(marker.take())
                .send()
                .await
                .map_err(|err| self.error("ListHostedZones", err))?;
            drop(permit);
            pages += 1;
            zones.extend(page.hosted_zones().iter().map(|zone| Zone {
                account: self.account.clone(),
                id: bare_zone_id(zone.id()).to_owned(),
                name: zone.name().to_owned(),
                private: zone.config().is_some_and(|c| c.private_zone()),
            }));
            match next_zone_marker(page.is_truncated(), page.next_marker()) {
                Ok(Some(next)) => marker = Some(next),
                Ok(None) => break,
                Err(message) => return Err(self.incomplete("ListHostedZones", message)),
            }
        }
        Ok((zones, pages))
    }

    /// Every zone associated with the VPC, whatever account owns it, as its owner. Only the
    /// VPC's owner sees other accounts' zones here: call it with the tools account's client.
    /// Zones owned by an AWS service (no owning account) are left out: none of them opt in.
    pub async fn list_zones_by_vpc(&self, vpc: &ProxyVpc) -> Result<Vec<ZoneKey>, ScanError> {
        let mut zones = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let permit = self.pace().await;
            let page = self
                .client
                .list_hosted_zones_by_vpc()
                .vpc_id(&vpc.vpc_id)
                .vpc_region(VpcRegion::from(vpc.region.as_str()))
                .max_items(ZONES_PER_PAGE)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|err| self.error("ListHostedZonesByVPC", err))?;
            drop(permit);
            zones.extend(page.hosted_zone_summaries().iter().filter_map(|summary| {
                let account = summary.owner()?.owning_account()?;
                Some(ZoneKey {
                    account: account.to_owned(),
                    id: bare_zone_id(summary.hosted_zone_id()).to_owned(),
                })
            }));
            match page.next_token() {
                Some(next) if !next.is_empty() => token = Some(next.to_owned()),
                _ => break,
            }
        }
        Ok(zones)
    }

    /// One zone by id; `None` when it no longer exists.
    pub async fn get_zone(&self, zone_id: &str) -> Result<Option<Zone>, ScanError> {
        let permit = self.pace().await;
        let result = self.client.get_hosted_zone().id(zone_id).send().await;
        drop(permit);
        match result {
            Ok(out) => Ok(out.hosted_zone().map(|zone| Zone {
                account: self.account.clone(),
                id: bare_zone_id(zone.id()).to_owned(),
                name: zone.name().to_owned(),
                private: zone.config().is_some_and(|c| c.private_zone()),
            })),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(GetHostedZoneError::is_no_such_hosted_zone) =>
            {
                Ok(None)
            }
            Err(err) => Err(self.error("GetHostedZone", err)),
        }
    }

    /// The record sets of a zone that `rules` can read ([`Sieve`]), paging through all of
    /// them, 300 a page: a page's other sets are dropped as it is read, so a zone's memory is
    /// what its rules look at, whatever its size. Route53's order (reversed labels, with `*`
    /// and `-` sorting unexpectedly) is never used to stop early: only `IsTruncated` ends
    /// the walk. `None` when the zone no longer exists.
    pub async fn read_records(
        &self,
        zone: &Zone,
        rules: &[Rule],
    ) -> Result<Option<(ZoneRecords, u32)>, ScanError> {
        let mut sieve = Sieve::new(rules, zone);
        let mut next = RecordCursor::default();
        let mut pages = 0;
        loop {
            let permit = self.pace().await;
            let result = self
                .client
                .list_resource_record_sets()
                .hosted_zone_id(&zone.id)
                .max_items(RECORDS_PER_PAGE)
                .set_start_record_name(next.name.take())
                .set_start_record_type(next.rtype.take())
                .set_start_record_identifier(next.identifier.take())
                .send()
                .await;
            drop(permit);
            let page = match result {
                Ok(page) => page,
                Err(err)
                    if err
                        .as_service_error()
                        .is_some_and(ListResourceRecordSetsError::is_no_such_hosted_zone) =>
                {
                    return Ok(None);
                }
                Err(err) => return Err(self.error("ListResourceRecordSets", err)),
            };
            pages += 1;
            sift_page(page.resource_record_sets(), &mut sieve);
            match next_record_cursor(
                page.is_truncated(),
                page.next_record_name(),
                page.next_record_type(),
                page.next_record_identifier(),
            ) {
                Ok(Some(cursor)) => next = cursor,
                Ok(None) => break,
                Err(message) => return Err(self.incomplete("ListResourceRecordSets", message)),
            }
        }
        Ok(Some((sieve.finish(), pages)))
    }
}

/// Keeps of one page of record sets those `sieve` wants, as the rules read them; the others
/// are never copied.
pub fn sift_page(sets: &[ResourceRecordSet], sieve: &mut Sieve) {
    for set in sets {
        if !sieve.wants(set.name(), set.r#type().as_str()) {
            continue;
        }
        sieve.keep(record_set(set));
    }
}

/// One record set as the rules read it, copied out of the SDK's.
pub fn record_set(set: &ResourceRecordSet) -> RecordSet {
    RecordSet {
        name: set.name().to_owned(),
        rtype: set.r#type().as_str().to_owned(),
        values: set
            .resource_records()
            .iter()
            .map(|r| r.value().to_owned())
            .collect(),
        alias_target: set.alias_target().map(|a| a.dns_name().to_owned()),
        set_identifier: set.set_identifier().map(str::to_owned),
    }
}

/// Where `ListResourceRecordSets` resumes: the three `NextRecord*` fields of the last page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct RecordCursor {
    pub name: Option<String>,
    pub rtype: Option<RrType>,
    pub identifier: Option<String>,
}

/// The marker of the next `ListHostedZones` page; `None` after the last page. A truncated
/// page without a marker is an error, never the end.
fn next_zone_marker(
    is_truncated: bool,
    next_marker: Option<&str>,
) -> Result<Option<String>, &'static str> {
    match (is_truncated, next_marker) {
        (false, _) => Ok(None),
        (true, Some(marker)) if !marker.is_empty() => Ok(Some(marker.to_owned())),
        (true, _) => Err(
            "IsTruncated is true but NextMarker is missing: the zone list would be \
                          incomplete, so nothing from this account is trusted",
        ),
    }
}

/// Where the next `ListResourceRecordSets` page starts; `None` after the last page. A
/// truncated page without `NextRecordName` is an error, never the end.
fn next_record_cursor(
    is_truncated: bool,
    name: Option<&str>,
    rtype: Option<&RrType>,
    identifier: Option<&str>,
) -> Result<Option<RecordCursor>, &'static str> {
    match (is_truncated, name) {
        (false, _) => Ok(None),
        (true, Some(name)) if !name.is_empty() => Ok(Some(RecordCursor {
            name: Some(name.to_owned()),
            rtype: rtype.cloned(),
            identifier: identifier.map(str::to_owned),
        })),
        (true, _) => Err(
            "IsTruncated is true but NextRecordName is missing: the zone's \
                          records would be incomplete, so its last known routes are kept",
        ),
    }
}

/// `/hostedzone/Z123` → `Z123`.
pub fn bare_zone_id(id: &str) -> &str {
    id.rsplit('/').next().unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_zone_page_without_a_marker_is_an_error_not_the_end() {
        assert_eq!(next_zone_marker(false, None), Ok(None));
        assert_eq!(next_zone_marker(false, Some("Z9")), Ok(None));
        assert_eq!(
            next_zone_marker(true, Some("Z9")),
            Ok(Some("Z9".to_owned()))
        );
        for missing in [None, Some("")] {
            let err = next_zone_marker(true, missing).unwrap_err();
            assert!(err.contains("NextMarker is missing"), "{err}");
        }
    }

    #[test]
    fn a_truncated_record_page_without_a_next_name_is_an_error_not_the_end() {
        assert_eq!(next_record_cursor(false, None, None, None), Ok(None));
        assert_eq!(
            next_record_cursor(true, Some("b.example."), Some(&RrType::A), Some("w1")),
            Ok(Some(RecordCursor {
                name: Some("b.example.".to_owned()),
                rtype: Some(RrType::A),
                identifier: Some("w1".to_owned()),
            }))
        );
        for missing in [None, Some("")] {
            let err = next_record_cursor(true, missing, Some(&RrType::A), None).unwrap_err();
            assert!(err.contains("NextRecordName is missing"), "{err}");
        }
    }

    #[test]
    fn zone_ids_lose_their_prefix() {
        assert_eq!(bare_zone_id("/hostedzone/Z0123ABC"), "Z0123ABC");
        assert_eq!(bare_zone_id("Z0123ABC"), "Z0123ABC");
    }
}
