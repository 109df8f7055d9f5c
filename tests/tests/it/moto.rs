//! The AWS stand-in itself: a fresh moto answers every call of a concurrent first burst.
//!
//! moto builds a REST service's request router on that service's first request, and in that
//! window a concurrent request can fail with 500 (see `Moto::start`). Tests fire their first
//! calls concurrently (seeding zones, scanning accounts) with SDK retries off, so the
//! harness calls each REST service once before it hands a server out.

use autoproxy_tests::moto::Moto;
use futures_util::future::join_all;

/// Fresh servers tried, and calls in each one's first burst, per service.
const SERVERS: usize = 4;
const BURST: usize = 16;

/// Starts a server and fires `BURST` CreateHostedZone and `BURST` CreateBucket at once; the
/// calls that failed, by what they said.
async fn first_burst() -> Vec<String> {
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    let sdk = moto.sdk_config().await;
    let route53 = aws_sdk_route53::Client::new(&sdk);
    let s3 = aws_sdk_s3::Client::new(&sdk);
    let zones = (0..BURST).map(|i| {
        let route53 = route53.clone();
        async move {
            route53
                .create_hosted_zone()
                .name(format!("z{i}.example.internal"))
                .caller_reference(format!("burst-{i}"))
                .send()
                .await
                .err()
                .map(|err| format!("CreateHostedZone: {err:?}"))
        }
    });
    let buckets = (0..BURST).map(|i| {
        let s3 = s3.clone();
        async move {
            s3.create_bucket()
                .bucket(format!("burst-{i}"))
                .send()
                .await
                .err()
                .map(|err| format!("CreateBucket: {err:?}"))
        }
    });
    let (zones, buckets) = tokio::join!(join_all(zones), join_all(buckets));
    zones.into_iter().chain(buckets).flatten().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fresh_server_answers_every_call_of_a_concurrent_first_burst() {
    let failed: Vec<String> = join_all((0..SERVERS).map(|_| first_burst()))
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} first calls failed; the first: {}",
        failed.len(),
        SERVERS * BURST * 2,
        failed[0]
    );
}
