//! Generations: they only grow, across every reset, and never past what the fleet reads.

use super::*;

#[tokio::test]
async fn generations_keep_growing_across_resets() {
    let zone = "reset.example.internal";
    let (estate, _) = Estate::with_api_zone(zone).await;
    let deps = estate.deps(&[]).await;
    assert!(run(&deps, &json!({}), AT).await.published);
    let first = estate.artifact().await.header.generation;
    assert_eq!(first, AT_SECS);

    // Another CONFIG_KEY (as a new stack with a new bucket): no config and no manifest to
    // count from, while the fleet still runs `first`.
    let moved_key = "haproxy/moved.cfg";
    let moved = estate.deps(&[("CONFIG_KEY", moved_key)]).await;
    assert!(run(&moved, &json!({}), LATER).await.published);
    let after_move = estate.artifact_at(moved_key).await.header.generation;
    assert!(
        after_move > first,
        "a new key started at generation {after_move}, not above the {first} the fleet runs"
    );

    // The bucket emptied: every version of the config and of the manifest gone.
    estate.delete_every_version(KEY).await;
    estate.delete_every_version(MANIFEST_KEY).await;
    assert!(run(&deps, &json!({}), LATER).await.published);
    let after_emptying = estate.artifact().await.header.generation;
    assert!(
        after_emptying > first,
        "an emptied bucket started at generation {after_emptying}, not above the {first} the \
         fleet runs"
    );
}

#[tokio::test]
async fn an_old_version_copied_over_the_config_never_lowers_the_generation() {
    let zone = "copied.example.internal";
    let (estate, seeded) = Estate::with_api_zone(zone).await;
    let ingress = ingress_pair(zone, PROXY, Wildcard::Literal);
    let deps = estate.deps(&[]).await;
    run(&deps, &json!({}), AT).await;
    let old = estate.artifact().await;
    estate.own.upsert(&seeded.id, &ingress).await.unwrap();
    assert!(run(&deps, &json!({}), LATER).await.published);
    let highest = estate.artifact().await.header.generation;
    assert!(highest > old.header.generation);

    // A hand-made rollback: the old version copied over the key and Route53 put back to
    // match it. Nothing to publish, but the manifest's zones changed, so it is written.
    estate.copy_version_over(KEY, &old.version_id).await;
    assert_eq!(estate.artifact().await.header, old.header);
    estate
        .own
        .delete_records(&seeded.id, &ingress)
        .await
        .unwrap();
    let manifests = estate.versions(MANIFEST_KEY).await;
    let unchanged = run(&deps, &json!({}), LATER).await;
    assert!(!unchanged.changed && !unchanged.published, "{unchanged:#?}");
    assert_eq!(estate.versions(MANIFEST_KEY).await, manifests + 1);
    assert_eq!(estate.manifest_generation().await, highest);

    // The next change goes out above everything published, the copy included. All in the
    // same second as `highest`, so the clock alone would not lift it.
    estate.own.upsert(&seeded.id, &ingress).await.unwrap();
    assert!(run(&deps, &json!({}), LATER).await.published);
    let next = estate.artifact().await.header.generation;
    assert!(
        next > highest,
        "published generation {next} after the fleet ran {highest}: the fleet skips it"
    );
}

#[tokio::test]
async fn a_generation_no_proxy_could_read_is_refused_and_nothing_is_written() {
    let zone = "huge.example.internal";
    let (estate, _) = Estate::with_api_zone(zone).await;
    let deps = estate.deps(&[]).await;
    assert!(run(&deps, &json!({}), AT).await.published);
    // Someone with write access to the bucket puts a config whose metadata generation would
    // wrap (u64::MAX) or that the apply document cannot read (19 digits).
    let published = estate.artifact().await;
    for huge in ["18446744073709551615", "1000000000000000000"] {
        estate
            .s3
            .put_object()
            .bucket(BUCKET)
            .key(KEY)
            .metadata("generation", huge)
            .body(published.text.as_bytes().to_vec().into())
            .send()
            .await
            .unwrap();
        let before = estate.versions(KEY).await;
        let err = run_at(&deps, &json!({"force": true}), LATER, None)
            .await
            .expect_err("a huge generation must be refused");
        let message = err.to_string();
        assert!(
            message.contains("metadata generation to be a whole number of at most 18 digits")
                && message.contains(huge),
            "{message}"
        );
        assert_eq!(estate.versions(KEY).await, before, "nothing written");
    }
}
