//! The apply document's parameters: whoever may send it chooses the config object and
//! nothing else.

use serde_yaml::Value;

use super::{keys_at, template};

/// The apply document's parameters a caller of `ssm:SendCommand` may choose: the config
/// object to install. Every other one is fixed when the stack is deployed.
const CALLER_CHOSEN: [&str; 3] = ["ConfigBucket", "ConfigKey", "ConfigVersion"];

/// The template parameter `value` names, if it is `!Ref <name>` (or `{Ref: <name>}`).
fn ref_target(value: &Value) -> Option<&str> {
    match value {
        Value::Tagged(tagged) if tagged.tag == "Ref" => tagged.value.as_str(),
        Value::Mapping(mapping) if mapping.len() == 1 => mapping.get("Ref")?.as_str(),
        _ => None,
    }
}

/// `!GetAtt Resource.Attribute` (or `{Fn::GetAtt: [Resource, Attribute]}`) as `Resource.Attribute`.
fn get_att_target(value: &Value) -> Option<String> {
    let target = match value {
        Value::Tagged(tagged) if tagged.tag == "GetAtt" => &tagged.value,
        Value::Mapping(mapping) if mapping.len() == 1 => mapping.get("Fn::GetAtt")?,
        _ => return None,
    };
    match target {
        Value::String(name) => Some(name.clone()),
        Value::Sequence(parts) => Some(
            parts
                .iter()
                .map(Value::as_str)
                .collect::<Option<Vec<_>>>()?
                .join("."),
        ),
        _ => None,
    }
}

/// The text of `!Sub <text>` when every `${…}` in it is a pseudo parameter (`${AWS::Region}`,
/// …): a value the stack itself fixes, which no deployer or caller chooses.
fn pseudo_sub(value: &Value) -> Option<&str> {
    let Value::Tagged(tagged) = value else {
        return None;
    };
    let text = tagged.value.as_str().filter(|_| tagged.tag == "Sub")?;
    let names = text.split("${").skip(1);
    names
        .map(|rest| rest.split('}').next().unwrap_or_default())
        .all(|name| name.starts_with("AWS::"))
        .then_some(text)
}

/// One line per apply-document parameter, outside `CALLER_CHOSEN`, that a caller could set
/// to something the deployer did not choose: its `allowedValues` must be exactly one
/// `!Ref` of a template parameter that constrains its value, one `!GetAtt` of a resource of
/// the stack (what the stack published: the agent's sha256), or one `!Sub` of pseudo
/// parameters only (the stack's own partition, region, account), and its `default` the same.
fn free_parameters(template: &Value) -> Vec<String> {
    let parameters =
        template["Resources"]["ApplyConfigDocument"]["Properties"]["Content"]["parameters"]
            .as_mapping()
            .expect("the apply document declares parameters");
    let mut problems = Vec::new();
    for (name, spec) in parameters {
        let name = name.as_str().expect("parameter names are strings");
        if CALLER_CHOSEN.contains(&name) {
            continue;
        }
        let only = match spec.get("allowedValues").and_then(Value::as_sequence) {
            Some(values) if values.len() == 1 => Some(&values[0]),
            _ => None,
        };
        if let Some(text) = only.and_then(pseudo_sub) {
            if spec.get("default").and_then(pseudo_sub) != Some(text) {
                problems.push(format!(
                    "{name}: default is not !Sub {text:?}: {:?}",
                    spec.get("default")
                ));
            }
            continue;
        }
        if let Some(attribute) = only.and_then(get_att_target) {
            let resource = attribute.split('.').next().unwrap_or_default();
            if template["Resources"].get(resource).is_none() {
                problems.push(format!(
                    "{name}: allowedValues names {attribute}, not an attribute of a resource of the stack"
                ));
            }
            if spec.get("default").and_then(get_att_target).as_deref() != Some(attribute.as_str()) {
                problems.push(format!(
                    "{name}: default is not !GetAtt {attribute}: {:?}",
                    spec.get("default")
                ));
            }
            continue;
        }
        let Some(bound) = only.and_then(ref_target) else {
            problems.push(format!(
                "{name}: allowedValues is not [!Ref <template parameter>] or [!GetAtt <resource>.<attribute>]: {:?}",
                spec.get("allowedValues")
            ));
            continue;
        };
        match template["Parameters"].get(bound) {
            None => problems.push(format!(
                "{name}: allowedValues names {bound}, not a template parameter"
            )),
            Some(declared)
                if declared.get("AllowedPattern").is_none()
                    && declared.get("AllowedValues").is_none() =>
            {
                problems.push(format!(
                    "{name}: template parameter {bound} has no AllowedPattern or AllowedValues"
                ));
            }
            Some(_) => {}
        }
        if spec.get("default").and_then(ref_target) != Some(bound) {
            problems.push(format!(
                "{name}: default is not !Ref {bound}: {:?}",
                spec.get("default")
            ));
        }
    }
    problems
}

/// Whoever may call `ssm:SendCommand` with the apply document chooses the config object and
/// nothing else: the file it writes and the command it runs as root are the deployer's.
#[test]
fn every_apply_document_parameter_but_the_config_object_is_fixed_at_deploy_time() {
    let template = template();
    let problems = free_parameters(&template);
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    // The configure function and the association pass exactly the caller-chosen ones.
    let association = &template["Resources"]["ApplyConfigAssociation"]["Properties"]["Parameters"];
    assert_eq!(
        keys_at(association, &[]),
        CALLER_CHOSEN.map(str::to_owned).into()
    );
}

/// The check itself must be able to fail: a free parameter, one bound to nothing, one whose
/// default escapes the binding.
#[test]
fn a_free_apply_document_parameter_is_reported() {
    let template: Value = serde_yaml::from_str(
        r"
Parameters:
  ProxyThing: {Type: String, Default: a, AllowedPattern: '^[a-z]+$'}
  Loose: {Type: String, Default: a}
Resources:
  Published: {Type: Custom::Thing}
  ApplyConfigDocument:
    Properties:
      Content:
        parameters:
          ConfigBucket: {type: String, allowedPattern: '^.*$'}
          Fixed: {type: String, default: !Ref ProxyThing, allowedValues: [!Ref ProxyThing]}
          Free: {type: String, default: x, allowedPattern: '^.*$'}
          Unbound: {type: String, default: !Ref Loose, allowedValues: [!Ref Loose]}
          Escapes: {type: String, default: other, allowedValues: [!Ref ProxyThing]}
          Missing: {type: String, default: !Ref Nowhere, allowedValues: [!Ref Nowhere]}
          Pinned: {type: String, default: !GetAtt Published.Sha, allowedValues: [!GetAtt Published.Sha]}
          Unpinned: {type: String, default: x, allowedValues: [!GetAtt Published.Sha]}
          Elsewhere: {type: String, default: !GetAtt Gone.Sha, allowedValues: [!GetAtt Gone.Sha]}
          Stacks: {type: String, default: !Sub 'a:${AWS::Region}', allowedValues: [!Sub 'a:${AWS::Region}']}
          Chosen: {type: String, default: !Sub 'a:${Loose}', allowedValues: [!Sub 'a:${Loose}']}
",
    )
    .unwrap();
    let problems = free_parameters(&template);
    let names: Vec<&str> = problems
        .iter()
        .map(|line| line.split(':').next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Free",
            "Unbound",
            "Escapes",
            "Missing",
            "Unpinned",
            "Elsewhere",
            "Chosen"
        ],
        "{problems:#?}"
    );
}
