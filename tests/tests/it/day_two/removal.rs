//! docs/RUNBOOK.md's removal of a release ("Remove"), where moto
//! allows it: the block that empties the two retained buckets runs as written, under `sh`
//! (dash), with the AWS CLI against moto, on a versioned config bucket holding more versions
//! than one page and a delete marker for each key, and an unversioned access-log bucket; both
//! are gone at the end.

use std::process::Command;

use autoproxy_tests::estate::versioned_bucket;
use autoproxy_tests::moto::Moto;

use super::{aws_first_on_path, doc_block};

#[tokio::test]
async fn the_documented_removal_empties_a_versioned_bucket_and_deletes_it() {
    let moto = Moto::start();
    let sdk = moto.sdk_config().await;
    let s3 = aws_sdk_s3::Client::new(&sdk);
    let bucket = "autoproxy-configbucket-retained";
    let logs = "autoproxy-accesslogbucket-retained";
    versioned_bucket(&sdk, bucket).await.unwrap();
    s3.create_bucket().bucket(logs).send().await.unwrap();
    for key in 0..3 {
        s3.put_object()
            .bucket(logs)
            .key(format!("access/{key}"))
            .body(b"a log line".to_vec().into())
            .send()
            .await
            .unwrap();
    }
    // 520 versions of 260 keys (over one page of 500), then a delete marker on each key.
    for key in 0..260 {
        for version in 0..2 {
            s3.put_object()
                .bucket(bucket)
                .key(format!("haproxy/{key}.cfg"))
                .body(format!("version {version}").into_bytes().into())
                .send()
                .await
                .unwrap();
        }
        s3.delete_object()
            .bucket(bucket)
            .key(format!("haproxy/{key}.cfg"))
            .send()
            .await
            .unwrap();
    }
    // The block that empties and deletes both buckets, with the names step 1 saves.
    let block = doc_block(
        "docs/RUNBOOK.md",
        "list-object-versions --bucket \"$bucket\"",
    );
    assert!(block.contains("aws s3api delete-bucket"), "{block}");
    let block = format!("config_bucket={bucket}\naccess_log_bucket={logs}\n{block}");
    let out = Command::new("dash")
        .args(["-e", "-c", &block])
        .env("PATH", aws_first_on_path())
        .envs(moto.env())
        .output()
        .unwrap();
    let said = [out.stdout, out.stderr].concat();
    assert!(
        out.status.success(),
        "the block exited {}: {}",
        out.status,
        String::from_utf8_lossy(&said)
    );
    let buckets = s3.list_buckets().send().await.unwrap();
    let left: Vec<_> = buckets.buckets().iter().filter_map(|b| b.name()).collect();
    assert!(
        !left.contains(&bucket) && !left.contains(&logs),
        "a bucket is still there: {left:?}"
    );
}
