//! Only the newest config is rolled out: a version that a later publish has replaced is never
//! sent (the fleet would install it only to replace it again), so a trickle of publishes costs
//! the fleet one rollout per rollout's duration, not one per publish.

use super::*;

/// A version an event announced that the config key no longer holds as its current one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Superseded {
    pub version_id: String,
    pub generation: String,
    /// The version the key holds now; `None` when it holds none (the config was deleted).
    pub current_version_id: Option<String>,
}

/// Whether `announced` is still the key's current version, or what replaced it.
pub fn replaced_by<'a>(announced: &str, current: Option<&'a str>) -> Option<Option<&'a str>> {
    match current {
        Some(current) if current == announced => None,
        other => Some(other),
    }
}

/// `Some` when a later version replaced the one `dispatch` announces: it is not rolled out.
pub(super) async fn superseded(
    deps: &Deps,
    dispatch: &Dispatch,
    generation: &str,
) -> Result<Option<Superseded>, ConfigureError> {
    let current = current_version(deps, dispatch).await?;
    let Some(by) = replaced_by(&dispatch.version_id, current.as_deref()) else {
        return Ok(None);
    };
    info!(
        version_id = %dispatch.version_id,
        generation,
        current = ?by,
        "a later version replaced this one: not rolled out"
    );
    Ok(Some(Superseded {
        version_id: dispatch.version_id.clone(),
        generation: generation.to_owned(),
        current_version_id: by.map(str::to_owned),
    }))
}

/// The version the config key holds now (`HeadObject` without a version: S3 answers the
/// latest, strongly consistent); `None` when the key holds none (deleted).
pub(super) async fn current_version(
    deps: &Deps,
    dispatch: &Dispatch,
) -> Result<Option<String>, ConfigureError> {
    let head = deps
        .s3
        .head_object()
        .bucket(&dispatch.bucket)
        .key(&dispatch.key)
        .send()
        .await;
    match head {
        Ok(head) => Ok(head.version_id().map(str::to_owned)),
        Err(err) if err.as_service_error().is_some_and(|e| e.is_not_found()) => Ok(None),
        Err(err) => Err(ConfigureError::Aws {
            operation: "HeadObject (current version)",
            bucket: dispatch.bucket.clone(),
            key: dispatch.key.clone(),
            version_id: dispatch.version_id.clone(),
            message: aws_error::reason(&err),
        }),
    }
}

/// The generation an exact version carries in its metadata (`unknown` when it carries none);
/// an error when the version does not exist.
pub(super) async fn generation_of(
    deps: &Deps,
    dispatch: &Dispatch,
) -> Result<String, ConfigureError> {
    let head = deps
        .s3
        .head_object()
        .bucket(&dispatch.bucket)
        .key(&dispatch.key)
        .version_id(&dispatch.version_id)
        .send()
        .await
        .map_err(|err| ConfigureError::Aws {
            operation: "HeadObject",
            bucket: dispatch.bucket.clone(),
            key: dispatch.key.clone(),
            version_id: dispatch.version_id.clone(),
            message: aws_error::reason(&err),
        })?;
    Ok(head
        .metadata()
        .and_then(|m| m.get(META_GENERATION))
        .cloned()
        .unwrap_or_else(|| "unknown".to_owned()))
}

/// The version that replaced `done` while it rolled out, unless this invocation handled it.
pub(super) async fn replacement(
    deps: &Deps,
    done: &Dispatch,
    outcome: &Outcome,
) -> Result<Option<Dispatch>, ConfigureError> {
    let Some(current) = current_version(deps, done).await? else {
        return Ok(None);
    };
    let handled = outcome.dispatched.iter().any(|r| r.version_id == current)
        || outcome.superseded.iter().any(|s| s.version_id == current);
    if handled {
        return Ok(None);
    }
    info!(version_id = %current, "a later version was published during the rollout: rolling it out now");
    Ok(Some(Dispatch {
        version_id: current,
        ..done.clone()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_current_version_is_rolled_out() {
        for (announced, current, expected) in [
            ("v2", Some("v2"), None),
            ("v1", Some("v2"), Some(Some("v2"))),
            ("v1", None, Some(None)),
        ] {
            assert_eq!(
                replaced_by(announced, current),
                expected,
                "{announced} with {current:?} current"
            );
        }
    }
}
