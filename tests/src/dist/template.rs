//! The bundle's template: `template.yaml` with what `sam build` builds pointing at the zips
//! beside it, narrowed to the one architecture the bundle holds, and stamped with the release.

use serde_yaml::value::Tag;
use serde_yaml::{Mapping, Value};

use super::{Arch, Artifact, DistError, Release, template_error};

/// The condition the template picks the proxies' image and instance type by.
const FLEET_ARCH_CONDITION: &str = "FleetIsX86";
/// The parameter naming the proxies' image on each architecture.
const IMAGE_PARAMETERS: [(Arch, &str); 2] = [
    (Arch::X86_64, "ProxyImage"),
    (Arch::Arm64, "ProxyImageArm64"),
];
/// The parameters naming an architecture: the functions' and the proxies'.
pub const ARCH_PARAMETERS: [(&str, &str); 2] = [
    ("Architecture", "the functions"),
    (
        "ProxyArchitecture",
        "the proxies' autoproxy-agent (AgentLayer)",
    ),
];
/// The stack's outputs that report the release it runs.
pub const RELEASE_OUTPUTS: [&str; 2] = ["ReleaseVersion", "ReleaseCommit"];
/// A Lambda function's description is at most this long.
const FUNCTION_DESCRIPTION_MAX: usize = 256;

/// The resource types whose description carries the release: every function, the inline ones
/// included, and the agent's layer.
const DESCRIBED_RELEASE: [&str; 3] = [
    "AWS::Serverless::Function",
    "AWS::Lambda::Function",
    "AWS::Serverless::LayerVersion",
];

/// The bundle's template: a copy of `template` whose functions and layers that `sam build`
/// builds point at their zips (and lose their build metadata: nothing is built from the
/// bundle), whose `Globals` no longer make the bundle's directory every function's code, which
/// offers `arch` alone (and reads no parameter only another architecture uses), and which
/// reports `release` (the stack's description, two outputs, each function's description).
/// With the zips it needs.
pub fn bundle_template(
    template: &Value,
    arch: Arch,
    release: &Release,
) -> Result<(Value, Vec<Artifact>), DistError> {
    let mut bundled = template.clone();
    if let Some(globals) = bundled
        .get_mut("Globals")
        .and_then(|g| g.get_mut("Function"))
        .and_then(Value::as_mapping_mut)
    {
        globals.remove("CodeUri");
    }
    let resources = bundled
        .get_mut("Resources")
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| template_error("no Resources mapping"))?;
    let mut artifacts = Vec::new();
    for (id, resource) in resources.iter_mut() {
        let id = id
            .as_str()
            .ok_or_else(|| template_error(format!("a resource id that is not a string: {id:?}")))?;
        if let Some(artifact) = prebuilt(id, resource)? {
            artifacts.push(artifact);
        }
    }
    if !artifacts.iter().any(|a| a.zip.starts_with("layers/")) {
        return Err(template_error("no layer built by sam build (AgentLayer)"));
    }
    only_arch(&mut bundled, arch)?;
    stamp(&mut bundled, release, arch)?;
    Ok((bundled, artifacts))
}

/// Points one resource at its zip when `sam build` builds it; what the bundle must ship for it.
fn prebuilt(id: &str, resource: &mut Value) -> Result<Option<Artifact>, DistError> {
    let kind = resource
        .get("Type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let kind = kind.as_str();
    let Some(metadata) = resource.get_mut("Metadata").and_then(Value::as_mapping_mut) else {
        return ensure_code(id, kind, resource).map(|()| None);
    };
    let Some(method) = metadata.remove("BuildMethod") else {
        return ensure_code(id, kind, resource).map(|()| None);
    };
    let properties = metadata.remove("BuildProperties");
    metadata.remove("ContextPath");
    let empty = metadata.is_empty();
    let (uri_key, zip, executable) = match (kind, method.as_str()) {
        ("AWS::Serverless::Function", Some("rust-cargolambda")) => {
            let binary = properties
                .as_ref()
                .and_then(|p| p.get("Binary"))
                .and_then(Value::as_str);
            if binary.is_none() {
                return Err(template_error(format!(
                    "{id}: rust-cargolambda without BuildProperties.Binary"
                )));
            }
            ("CodeUri", format!("functions/{id}.zip"), "bootstrap")
        }
        ("AWS::Serverless::LayerVersion", Some("makefile")) => {
            ("ContentUri", format!("layers/{id}.zip"), "autoproxy-agent")
        }
        (kind, method) => {
            return Err(template_error(format!(
                "{id}: expected a rust-cargolambda function or a makefile layer, got {kind} built with {method:?}"
            )));
        }
    };
    let map = resource
        .as_mapping_mut()
        .ok_or_else(|| template_error(format!("{id}: not a mapping")))?;
    if empty {
        map.remove("Metadata");
    }
    let props = map
        .entry(Value::from("Properties"))
        .or_insert_with(|| Value::Mapping(Mapping::new()))
        .as_mapping_mut()
        .ok_or_else(|| template_error(format!("{id}: Properties is not a mapping")))?;
    props.insert(Value::from(uri_key), Value::from(zip.clone()));
    Ok(Some(Artifact {
        logical_id: id.to_owned(),
        zip,
        executable: executable.to_owned(),
    }))
}

/// A function the bundle does not build must carry its code itself (`Globals` no longer
/// give it the bundle's directory).
fn ensure_code(id: &str, kind: &str, resource: &Value) -> Result<(), DistError> {
    let has = |key: &str| {
        resource
            .get("Properties")
            .and_then(|p| p.get(key))
            .is_some()
    };
    if kind == "AWS::Serverless::Function" && !has("CodeUri") && !has("InlineCode") {
        return Err(template_error(format!(
            "{id}: a function with neither a build method nor CodeUri/InlineCode"
        )));
    }
    Ok(())
}

/// Narrows the template to `arch`: each architecture parameter offers it alone, the layers
/// claim it alone, the fleet's `!If`s on the architecture keep its branch, and the image
/// parameter of the other architecture goes (CloudFormation reads an SSM-typed parameter at
/// every deploy, used or not).
fn only_arch(template: &mut Value, arch: Arch) -> Result<(), DistError> {
    for (name, what) in ARCH_PARAMETERS {
        let parameter = template
            .get_mut("Parameters")
            .and_then(|p| p.get_mut(name))
            .and_then(Value::as_mapping_mut)
            .ok_or_else(|| template_error(format!("no parameter {name}")))?;
        let offered = parameter
            .get("AllowedValues")
            .and_then(Value::as_sequence)
            .is_some_and(|values| values.iter().any(|v| v.as_str() == Some(arch.name())));
        if !offered {
            return Err(template_error(format!(
                "parameter {name} does not offer {}",
                arch.name()
            )));
        }
        let arch = arch.name();
        parameter.insert("Default".into(), arch.into());
        parameter.insert("AllowedValues".into(), Value::Sequence(vec![arch.into()]));
        parameter.insert(
            "Description".into(),
            format!(
                "{arch} only: this release bundle holds {what} built for {arch}. Another \
                 architecture needs a build from source (docs/DEPLOY.md)."
            )
            .into(),
        );
    }
    let x86 = arch == Arch::X86_64;
    for section in ["Resources", "Outputs", "Conditions", "Rules"] {
        if let Some(value) = template.get_mut(section) {
            resolve_if(value, FLEET_ARCH_CONDITION, x86);
        }
    }
    if let Some(conditions) = template
        .get_mut("Conditions")
        .and_then(Value::as_mapping_mut)
    {
        conditions.remove(FLEET_ARCH_CONDITION);
    }
    if let Some(resources) = template
        .get_mut("Resources")
        .and_then(Value::as_mapping_mut)
    {
        for (_, resource) in resources.iter_mut() {
            if let Some(compatible) = resource
                .get_mut("Properties")
                .and_then(|p| p.get_mut("CompatibleArchitectures"))
            {
                *compatible = Value::Sequence(vec![arch.name().into()]);
            }
        }
    }
    let unused: Vec<&str> = IMAGE_PARAMETERS
        .iter()
        .filter(|(other, _)| *other != arch)
        .map(|(_, name)| *name)
        .collect();
    for name in unused.iter().copied().chain([FLEET_ARCH_CONDITION]) {
        if still_named(template, name)? {
            return Err(template_error(format!(
                "{name} is still used once the template holds {} alone",
                arch.name()
            )));
        }
    }
    if let Some(parameters) = template
        .get_mut("Parameters")
        .and_then(Value::as_mapping_mut)
    {
        for name in &unused {
            parameters.remove(*name);
        }
    }
    Ok(())
}

/// Replaces every `!If [condition, then, else]` under `value` with the branch `holds` picks.
fn resolve_if(value: &mut Value, condition: &str, holds: bool) {
    let picked = match value {
        Value::Tagged(tagged) if tagged.tag == Tag::new("If") => match &tagged.value {
            Value::Sequence(args) if args.len() == 3 && args[0].as_str() == Some(condition) => {
                Some(args[if holds { 1 } else { 2 }].clone())
            }
            _ => None,
        },
        _ => None,
    };
    if let Some(branch) = picked {
        *value = branch;
        resolve_if(value, condition, holds);
        return;
    }
    match value {
        Value::Tagged(tagged) => resolve_if(&mut tagged.value, condition, holds),
        Value::Sequence(items) => {
            for item in items {
                resolve_if(item, condition, holds);
            }
        }
        Value::Mapping(map) => {
            for (_, item) in map.iter_mut() {
                resolve_if(item, condition, holds);
            }
        }
        _ => {}
    }
}

/// Whether the template still names `name` where CloudFormation would resolve it (its
/// resources, outputs, conditions, rules, metadata), as a whole word of its text.
fn still_named(template: &Value, name: &str) -> Result<bool, DistError> {
    for section in [
        "Resources",
        "Outputs",
        "Conditions",
        "Rules",
        "Metadata",
        "Globals",
    ] {
        let Some(value) = template.get(section) else {
            continue;
        };
        let text = serde_yaml::to_string(value).map_err(|e| template_error(e.to_string()))?;
        let word = |c: char| !(c.is_ascii_alphanumeric() || c == '_');
        if text.split(word).any(|w| w == name) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes the release into the template: a sentence at the end of its description, the
/// outputs [`RELEASE_OUTPUTS`], `GenerateOnDeploy`'s `Release` (a new release updates that
/// custom resource, so the deploy runs the generator again even when only code changed), and
/// the version and short commit at the end of each function's and layer's description (what
/// the Lambda console and `aws lambda get-function` show).
fn stamp(template: &mut Value, release: &Release, arch: Arch) -> Result<(), DistError> {
    let map = template
        .as_mapping_mut()
        .ok_or_else(|| template_error("not a mapping"))?;
    let description = description_of(map);
    let release_line = format!(
        "Release {} (commit {}), the release bundle for {}.",
        release.version,
        release.commit,
        arch.name()
    );
    map.insert(
        "Description".into(),
        format!("{description}\n{release_line}\n")
            .trim_start()
            .into(),
    );
    let outputs = map
        .entry("Outputs".into())
        .or_insert_with(|| Value::Mapping(Mapping::new()))
        .as_mapping_mut()
        .ok_or_else(|| template_error("Outputs is not a mapping"))?;
    for (name, value, what) in [
        (
            RELEASE_OUTPUTS[0],
            release.version,
            "The autoproxy release this stack runs (its bundle's version).",
        ),
        (
            RELEASE_OUTPUTS[1],
            release.commit,
            "The commit the release bundle was built from.",
        ),
    ] {
        outputs.insert(
            name.into(),
            Value::Mapping(Mapping::from_iter([
                ("Description".into(), what.into()),
                ("Value".into(), value.into()),
            ])),
        );
    }
    let on_deploy = map
        .get_mut("Resources")
        .and_then(|resources| resources.get_mut("GenerateOnDeploy"))
        .and_then(|resource| resource.get_mut("Properties"))
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| template_error("no GenerateOnDeploy resource with Properties"))?;
    on_deploy.insert(
        "Release".into(),
        format!("{} (commit {})", release.version, release.commit).into(),
    );
    stamp_resources(map, release)
}

/// Each function's and layer's description, ended with the release's version and short commit.
fn stamp_resources(map: &mut Mapping, release: &Release) -> Result<(), DistError> {
    let short = match release.commit.strip_suffix("-dirty") {
        Some(head) => format!("{}-dirty", head.chars().take(12).collect::<String>()),
        None => release.commit.chars().take(12).collect(),
    };
    let resources = map
        .get_mut("Resources")
        .and_then(Value::as_mapping_mut)
        .ok_or_else(|| template_error("no Resources mapping"))?;
    for (id, resource) in resources.iter_mut() {
        let kind = resource
            .get("Type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !DESCRIBED_RELEASE.contains(&kind) {
            continue;
        }
        let Some(props) = resource
            .get_mut("Properties")
            .and_then(Value::as_mapping_mut)
        else {
            continue;
        };
        let own = description_of(props);
        let stamped = format!("{own} autoproxy {} ({short}).", release.version)
            .trim_start()
            .to_owned();
        if stamped.len() > FUNCTION_DESCRIPTION_MAX {
            return Err(template_error(format!(
                "{id:?}: expected a description of at most {FUNCTION_DESCRIPTION_MAX} characters once stamped, got {} ({stamped:?})",
                stamped.len()
            )));
        }
        props.insert("Description".into(), stamped.into());
    }
    Ok(())
}

/// The `Description` of a template or a resource's properties, trailing space dropped.
fn description_of(map: &Mapping) -> String {
    map.get("Description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim_end()
        .to_owned()
}

/// The template's text: YAML as serde_yaml writes it, with every date-like plain scalar
/// quoted. serde_yaml quotes by YAML 1.2, where `2012-10-17` is a string; PyYAML (the SAM CLI,
/// the AWS CLI, cfn-lint) reads YAML 1.1, where it is a date.
pub fn template_text(template: &Value) -> Result<String, DistError> {
    let text = serde_yaml::to_string(template).map_err(|e| template_error(e.to_string()))?;
    Ok(text.lines().map(quote_date).collect::<Vec<_>>().join("\n") + "\n")
}

/// One line with a plain date value (`Version: 2012-10-17`, `- 2012-10-17`) quoted.
fn quote_date(line: &str) -> String {
    let value_at = line.rfind(": ").map(|i| i + 2).or_else(|| {
        line.trim_start()
            .starts_with("- ")
            .then(|| line.len() - line.trim_start().len() + 2)
    });
    if let Some(at) = value_at {
        let value = &line[at..];
        let date = value.len() == 10
            && value.char_indices().all(|(i, c)| {
                if i == 4 || i == 7 {
                    c == '-'
                } else {
                    c.is_ascii_digit()
                }
            });
        if date {
            return format!("{}'{value}'", &line[..at]);
        }
    }
    line.to_owned()
}
