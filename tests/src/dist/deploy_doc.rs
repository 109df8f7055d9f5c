//! The bundle's copy of docs/DEPLOY.md: the repository's, told apart for a bundle user. A note
//! under its title says which parts build from source and where a bundle's runbook is
//! (docs/RUNBOOK.md), and the parameter table gives `Architecture` and `ProxyArchitecture` the
//! one value the bundle's template offers.

use super::{Arch, DistError, Release};

/// The rows of the parameter table the bundle's template changes, by the parameter's name.
const ARCH_ROWS: [&str; 2] = ["| `Architecture` |", "| `ProxyArchitecture` |"];

/// `text` (docs/DEPLOY.md) as the bundle of `release` for `arch` carries it.
pub fn bundle_deploy_doc(text: &str, release: &Release, arch: Arch) -> Result<String, DistError> {
    let title = text
        .lines()
        .next()
        .filter(|line| line.starts_with("# "))
        .ok_or_else(|| missing("a `# ` title on its first line"))?;
    let note = format!(
        "\n> **This copy comes with the release bundle autoproxy {version} for {arch}.** From the\n\
         > bundle, deploy as its `README.md` shows, and upgrade, roll back, answer the alarms and\n\
         > remove as its runbook, [docs/RUNBOOK.md](RUNBOOK.md), does. What builds from\n\
         > source (`sam build`, cargo-lambda, `samconfig.toml`, `sam deploy --guided`) is for a\n\
         > clone of the repository: `--guided` here would write a `samconfig.toml` into the\n\
         > bundle's directory, which a later deploy from it would apply again. `Architecture` and\n\
         > `ProxyArchitecture` take `{arch}` alone.\n",
        version = release.version,
        arch = arch.name()
    );
    let mut out = format!("{title}\n{note}");
    let mut found = 0;
    for line in text.lines().skip(1) {
        match ARCH_ROWS.iter().find(|row| line.starts_with(*row)) {
            Some(row) => {
                found += 1;
                out.push_str(&format!(
                    "{row} `{arch}` alone: the machine this bundle's binaries are built for | `{arch}` |\n",
                    arch = arch.name()
                ));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    if found != ARCH_ROWS.len() {
        return Err(missing(
            "one parameter-table row for each of `Architecture` and `ProxyArchitecture`",
        ));
    }
    Ok(out)
}

fn missing(what: &str) -> DistError {
    DistError::File {
        path: "docs/DEPLOY.md".into(),
        what: "make the bundle's copy",
        detail: format!("expected {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RELEASE: Release = Release {
        version: "9.8.7",
        commit: "0123456789ab",
    };

    #[test]
    fn the_bundles_copy_says_what_is_for_a_clone_and_offers_its_architecture_alone() {
        let text = std::fs::read_to_string(crate::root().join("docs/DEPLOY.md")).unwrap();
        let copy = bundle_deploy_doc(&text, &RELEASE, Arch::X86_64).unwrap();
        assert!(copy.starts_with("# Deploying autoproxy\n\n> **This copy comes with the release bundle autoproxy 9.8.7 for x86_64.**"), "{}", &copy[..300]);
        for row in ARCH_ROWS {
            let line = copy.lines().find(|l| l.starts_with(row)).unwrap();
            assert!(
                line.ends_with("| `x86_64` |") && !line.contains("arm64"),
                "{line}"
            );
        }
        assert_eq!(copy.lines().count(), text.lines().count() + 8);
    }

    #[test]
    fn a_doc_without_the_rows_is_refused() {
        let err = bundle_deploy_doc(
            "# Deploying\n\n| `Architecture` | x | `arm64` |\n",
            &RELEASE,
            Arch::X86_64,
        )
        .unwrap_err();
        assert!(err.to_string().contains("`ProxyArchitecture`"), "{err}");
        assert!(bundle_deploy_doc("no title", &RELEASE, Arch::X86_64).is_err());
    }
}
