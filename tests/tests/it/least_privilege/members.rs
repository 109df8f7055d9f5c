//! The generator listing its member accounts from Organizations, with exactly its grants.

use super::*;

/// The generator listing its members, from units and from the whole organization: without
/// one of its Organizations grants the first run fails; later runs fall back on the members
/// the manifest names and say so in a warning, which is what a run reports as its failure.
#[tokio::test(flavor = "multi_thread")]
async fn the_generator_lists_members_with_exactly_its_template_policy() {
    assert_eq!(
        prove_member_listing(false).await,
        [
            "ReadWriteConfigAndManifest",
            "ReadTemplate",
            "ListUnitAccounts",
            "ListUnitChildren"
        ]
    );
    assert_eq!(
        prove_member_listing(true).await,
        [
            "ReadWriteConfigAndManifest",
            "ReadTemplate",
            "ListOrganizationAccounts"
        ]
    );
}

/// [`prove`] for a generator whose members are listed from a unit, or the whole organization.
async fn prove_member_listing(whole_organization: bool) -> Vec<String> {
    use autoproxy_generate::members::Members;
    use autoproxy_tests::organization::Organization;

    let template = template();
    let (iam, admin, principal) = enforcing_with_bucket().await;
    let organization = Organization::create(&admin).await.unwrap();
    let unit = organization
        .unit(&organization.root, "workloads")
        .await
        .unwrap();
    let source = if whole_organization {
        "organization"
    } else {
        unit.as_str()
    };
    let (_route53, route53_sdk) = route53_with_one_zone().await;
    let settings = member_settings(source);
    let members = settings.member_accounts.clone().unwrap();
    let accounts = vec![AccountRoute53::new(
        OWN_ACCOUNT,
        &aws_sdk_route53::Config::new(&route53_sdk),
        1000.0,
    )];
    let mut deps = Deps::with_accounts(settings, &principal, accounts).unwrap();
    deps.members = Some(Members::new(members, &principal, "aws", 1000.0));
    let mut stack = stack(&template);
    for (condition, holds) in [
        ("ListsMemberAccounts", true),
        ("ListsWholeOrganization", whole_organization),
        ("ListsUnits", !whole_organization),
    ] {
        stack.conditions.insert(condition.into(), holds);
    }
    stack
        .refs
        .insert("MemberRoleName".into(), json!("autoproxy-route53-read"));
    let statements = statements_in(&template, "GenerateFunction", &stack);
    let expected = generate_with_members(!whole_organization);
    let checks = classified(&statements, &expected);
    prove(&iam, checks, || async {
        let summary = run_at(&deps, &json!({}), AT, None)
            .await
            .map_err(|err| err.to_string())?;
        match summary
            .warnings
            .iter()
            .find(|w| w.contains("organizations:"))
        {
            Some(listing) => Err(listing.clone()),
            None => Ok(()),
        }
    })
    .await
}

/// The generator's settings with its members listed from `source` (`MEMBER_ACCOUNTS`).
fn member_settings(source: &str) -> GenerateSettings {
    GenerateSettings::from_lookup(|name| {
        match name {
            "CONFIG_BUCKET" => Some(BUCKET),
            "CONFIG_KEY" => Some(KEY),
            "PEERING_PROXY_HOSTNAME" => Some(PROXY),
            "TEMPLATE_KEY" => Some(TEMPLATE_KEY),
            "MEMBER_ACCOUNTS" => Some(source),
            "MEMBER_ROLE_NAME" => Some("autoproxy-route53-read"),
            "MEMBER_REGIONS" => Some(autoproxy_tests::moto::REGION),
            _ => None,
        }
        .map(str::to_owned)
    })
    .unwrap()
}
