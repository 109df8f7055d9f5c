//! `MEMBER_ACCOUNTS` and `MEMBER_ROLE_NAME`: where the member accounts come from (the whole
//! Organization, some of its units, or a list of ids) and the read role's name in each. Unlike
//! `ACCOUNT_ROLE_ARNS`, the first two keep no list of accounts in the Lambda environment (4 KB
//! for every variable together: about 70 role ARNs), so the estate can grow without a redeploy.

use super::{SettingsError, invalid, list};
use crate::model::is_account_id;

/// Where the member accounts come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberSource {
    /// Every active account of the Organization (`organizations:ListAccounts`).
    Organization,
    /// The active accounts in these organizational units and every unit below them, as a
    /// service-managed StackSet deploys to them (`ListAccountsForParent`,
    /// `ListOrganizationalUnitsForParent`).
    Units(Vec<String>),
    /// These accounts; no Organizations call.
    Accounts(Vec<String>),
}

/// The member accounts and the role the generator assumes in each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberAccounts {
    pub source: MemberSource,
    /// The role's name, the same in every member (the member StackSet creates it).
    pub role_name: String,
}

impl MemberAccounts {
    /// The role to assume in `account`, in the caller's partition (`aws`, `aws-cn`,
    /// `aws-us-gov`).
    pub fn role_arn(&self, partition: &str, account: &str) -> String {
        format!("arn:{partition}:iam::{account}:role/{}", self.role_name)
    }
}

const SOURCE_EXPECTED: &str = "\"organization\", comma-separated organizational unit ids \
                               (ou-abcd-12345678), or comma-separated 12-digit account ids";

/// Reads both variables: both set, or neither.
pub fn parse(
    accounts: Option<String>,
    role_name: Option<String>,
) -> Result<Option<MemberAccounts>, SettingsError> {
    match (accounts, role_name) {
        (None, None) => Ok(None),
        (Some(raw), None) => Err(invalid(
            "MEMBER_ROLE_NAME",
            format!("the member role's name, because MEMBER_ACCOUNTS is set ({raw:?})"),
            "",
        )),
        (None, Some(name)) => Err(invalid(
            "MEMBER_ACCOUNTS",
            format!("{SOURCE_EXPECTED}, because MEMBER_ROLE_NAME is set ({name:?})"),
            "",
        )),
        (Some(raw), Some(name)) => Ok(Some(MemberAccounts {
            source: source(&raw)?,
            role_name: role_name_of(&name)?,
        })),
    }
}

fn source(raw: &str) -> Result<MemberSource, SettingsError> {
    if raw.eq_ignore_ascii_case("organization") {
        return Ok(MemberSource::Organization);
    }
    let items: Vec<String> = list(Some(raw.to_owned())).collect();
    if items.is_empty() {
        return Err(invalid("MEMBER_ACCOUNTS", SOURCE_EXPECTED, raw));
    }
    if items.iter().all(|item| is_unit_id(item)) {
        return Ok(MemberSource::Units(super::sorted(items)));
    }
    if items.iter().all(|item| is_account_id(item)) {
        return Ok(MemberSource::Accounts(super::sorted(items)));
    }
    let odd = items
        .iter()
        .find(|item| !is_unit_id(item) && !is_account_id(item))
        .map_or("a mix of unit and account ids", String::as_str);
    Err(invalid(
        "MEMBER_ACCOUNTS",
        format!("{SOURCE_EXPECTED}, not mixed (first odd entry: {odd:?})"),
        raw,
    ))
}

/// `ou-` + the root's 4–32 characters + `-` + 8–32 characters (Organizations' own pattern).
pub fn is_unit_id(raw: &str) -> bool {
    let Some(rest) = raw.strip_prefix("ou-") else {
        return false;
    };
    let Some((root, unit)) = rest.split_once('-') else {
        return false;
    };
    let lower_alnum = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (4..=32).contains(&root.len())
        && (8..=32).contains(&unit.len())
        && lower_alnum(root)
        && lower_alnum(unit)
}

/// An IAM role name: 1–64 of letters, digits and `+=,.@_-`.
fn role_name_of(raw: &str) -> Result<String, SettingsError> {
    let valid = (1..=64).contains(&raw.len())
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b));
    if valid {
        Ok(raw.to_owned())
    } else {
        Err(invalid(
            "MEMBER_ROLE_NAME",
            "an IAM role name: 1 to 64 letters, digits or +=,.@_- (no path, no ARN)",
            raw,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(accounts: Option<&str>, role: Option<&str>) -> Result<Option<MemberAccounts>, String> {
        parse(accounts.map(str::to_owned), role.map(str::to_owned)).map_err(|e| e.to_string())
    }

    #[test]
    fn sources_and_role_names() {
        let units = |ids: &[&str]| MemberSource::Units(ids.iter().map(|s| (*s).into()).collect());
        let ids = |ids: &[&str]| MemberSource::Accounts(ids.iter().map(|s| (*s).into()).collect());
        for (raw, expected) in [
            ("organization", MemberSource::Organization),
            ("Organization", MemberSource::Organization),
            ("ou-ab12-cdef5678", units(&["ou-ab12-cdef5678"])),
            (
                "ou-ab12-zzzzzzzz , ou-ab12-cdef5678",
                units(&["ou-ab12-cdef5678", "ou-ab12-zzzzzzzz"]),
            ),
            (
                "222222222222,111111111111,111111111111",
                ids(&["111111111111", "222222222222"]),
            ),
        ] {
            let got = check(Some(raw), Some("autoproxy-reader")).unwrap().unwrap();
            assert_eq!(got.source, expected, "{raw}");
        }
        assert_eq!(check(None, None), Ok(None));
    }

    #[test]
    fn malformed_settings_say_what_was_expected_and_what_arrived() {
        for (accounts, role, fragments) in [
            (
                Some("organisation"),
                Some("r"),
                &["MEMBER_ACCOUNTS", "\"organisation\""][..],
            ),
            (
                Some("ou-ab12-cdef5678,111111111111"),
                Some("r"),
                &["not mixed"],
            ),
            (Some("11111111111"), Some("r"), &["12-digit", "11111111111"]),
            (Some("OU-AB12-CDEF5678"), Some("r"), &["ou-abcd-12345678"]),
            (Some(" , "), Some("r"), &["MEMBER_ACCOUNTS"]),
            (
                Some("organization"),
                None,
                &["MEMBER_ROLE_NAME", "MEMBER_ACCOUNTS is set"],
            ),
            (
                None,
                Some("r"),
                &["MEMBER_ACCOUNTS", "MEMBER_ROLE_NAME is set"],
            ),
            (
                Some("organization"),
                Some("arn:aws:iam::111111111111:role/r"),
                &["no path, no ARN", "arn:aws:iam"],
            ),
            (Some("organization"), Some("a/b"), &["MEMBER_ROLE_NAME"]),
            (Some("organization"), Some(&*"r".repeat(65)), &["1 to 64"]),
        ] {
            let err = check(accounts, role).unwrap_err();
            for fragment in fragments {
                assert!(err.contains(fragment), "{accounts:?} {role:?}: {err}");
            }
        }
    }

    #[test]
    fn the_role_arn_carries_the_partition() {
        let members = check(Some("organization"), Some("autoproxy-reader"))
            .unwrap()
            .unwrap();
        assert_eq!(
            members.role_arn("aws-cn", "111111111111"),
            "arn:aws-cn:iam::111111111111:role/autoproxy-reader"
        );
    }
}
