use super::*;

/// A template shaped like template.yaml where the bundle touches it.
const TEMPLATE: &str = r#"
Transform: AWS::Serverless-2016-10-31
Parameters:
  Architecture:
    Type: String
    Description: Lambda architecture.
    Default: arm64
    AllowedValues: [arm64, x86_64]
  ProxyArchitecture:
    Type: String
    Default: x86_64
    AllowedValues: [x86_64, arm64]
Globals:
  Function:
    Runtime: provided.al2023
    Architectures: [!Ref Architecture]
    CodeUri: .
Resources:
  GenerateFunction:
    Type: AWS::Serverless::Function
    Metadata:
      BuildMethod: rust-cargolambda
      BuildProperties:
        Binary: autoproxy-generate
      checkov:
        skip: [{id: CKV_AWS_117}]
    Properties:
      Layers: [!Ref AgentLayer]
  AgentLayer:
    Type: AWS::Serverless::LayerVersion
    Metadata:
      BuildMethod: makefile
      ContextPath: .
    Properties:
      ContentUri: functions/agent
  ConfigBucket:
    Type: AWS::S3::Bucket
"#;

fn bundled(text: &str, arch: Arch) -> Result<(Value, Vec<Artifact>), DistError> {
    bundle_template(&serde_yaml::from_str(text).unwrap(), arch)
}

#[test]
fn functions_and_layers_point_at_their_zips_and_lose_their_build() {
    let (template, artifacts) = bundled(TEMPLATE, Arch::X86_64).unwrap();
    let resources = &template["Resources"];
    let function = &resources["GenerateFunction"];
    assert_eq!(
        function["Properties"]["CodeUri"],
        "functions/GenerateFunction.zip"
    );
    // The build goes, the checks' metadata stays.
    assert_eq!(
        function["Metadata"]
            .as_mapping()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        [&Value::from("checkov")]
    );
    let layer = &resources["AgentLayer"];
    assert_eq!(layer["Properties"]["ContentUri"], "layers/AgentLayer.zip");
    assert!(layer.get("Metadata").is_none(), "{layer:?}");
    assert_eq!(template["Globals"]["Function"].get("CodeUri"), None);
    // Tags survive: CloudFormation still resolves them.
    assert_eq!(
        serde_yaml::to_string(&function["Properties"]["Layers"]).unwrap(),
        "- !Ref AgentLayer\n"
    );
    assert_eq!(
        artifacts,
        [
            Artifact {
                logical_id: "GenerateFunction".into(),
                zip: "functions/GenerateFunction.zip".into(),
                executable: "bootstrap".into(),
            },
            Artifact {
                logical_id: "AgentLayer".into(),
                zip: "layers/AgentLayer.zip".into(),
                executable: "autoproxy-agent".into(),
            },
        ]
    );
}

#[test]
fn the_built_architecture_is_the_default_and_a_rule_refuses_any_other() {
    let (template, _) = bundled(TEMPLATE, Arch::X86_64).unwrap();
    for name in ["Architecture", "ProxyArchitecture"] {
        assert_eq!(template["Parameters"][name]["Default"], "x86_64", "{name}");
    }
    let text = serde_yaml::to_string(&template["Rules"]).unwrap();
    assert_eq!(
        text,
        "ReleaseBundleArchitecture:\n  Assertions:\n  - Assert: !Equals\n    - !Ref Architecture\n    \
         - x86_64\n    AssertDescription: 'This release bundle holds the functions built for x86_64 \
         only: Architecture=x86_64. Another architecture needs a build from source (docs/DEPLOY.md).'\n  \
         - Assert: !Equals\n    - !Ref ProxyArchitecture\n    - x86_64\n    AssertDescription: \
         'This release bundle holds the proxies'' autoproxy-agent (AgentLayer) built for x86_64 only: \
         ProxyArchitecture=x86_64. Another architecture needs a build from source (docs/DEPLOY.md).'\n"
    );
}

#[test]
fn dates_are_quoted_for_yaml_1_1_readers() {
    let template: Value = serde_yaml::from_str(
        "AWSTemplateFormatVersion: '2010-09-09'\nPolicy:\n  Version: '2012-10-17'\n  \
         List: ['2012-10-17', 'x: 2012-10-17 ']\n  Name: 2012-10-1x\n",
    )
    .unwrap();
    assert_eq!(
        template_text(&template).unwrap(),
        "AWSTemplateFormatVersion: '2010-09-09'\nPolicy:\n  Version: '2012-10-17'\n  List:\n  \
         - '2012-10-17'\n  - 'x: 2012-10-17 '\n  Name: 2012-10-1x\n"
    );
}

#[test]
fn what_the_bundle_cannot_ship_is_refused() {
    let check = |text: &str, arch: Arch, expected: &str| {
        let err = bundled(text, arch).unwrap_err().to_string();
        assert!(err.contains(expected), "{expected:?} not in {err:?}");
    };
    check(
        &TEMPLATE.replace("AllowedValues: [arm64, x86_64]", "AllowedValues: [arm64]"),
        Arch::X86_64,
        "parameter Architecture does not offer x86_64",
    );
    check(
        &TEMPLATE.replace("BuildMethod: makefile", "BuildMethod: go1.x"),
        Arch::X86_64,
        "AgentLayer: expected a rust-cargolambda function or a makefile layer",
    );
    check(
        &TEMPLATE.replace("        Binary: autoproxy-generate\n", "        Other: x\n"),
        Arch::X86_64,
        "GenerateFunction: rust-cargolambda without BuildProperties.Binary",
    );
    // A function without a build leaned on Globals' CodeUri, which the bundle drops.
    check(
        &TEMPLATE.replace("      BuildMethod: rust-cargolambda\n", ""),
        Arch::X86_64,
        "GenerateFunction: a function with neither a build method nor CodeUri/InlineCode",
    );
    check(
        &TEMPLATE.replace("      BuildMethod: makefile\n", ""),
        Arch::Arm64,
        "no layer built by sam build",
    );
}

#[test]
fn elf_machines_are_read_from_the_header() {
    let elf = |machine: u16| {
        let mut bytes = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        bytes.resize(18, 0);
        bytes.extend(machine.to_le_bytes());
        bytes.resize(64, 0);
        bytes
    };
    assert_eq!(elf_machine(&elf(0x3e)), Ok(Arch::X86_64.elf_machine()));
    assert_eq!(elf_machine(&elf(0xb7)), Ok(Arch::Arm64.elf_machine()));
    assert!(elf_machine(b"PK\x03\x04 a zip, not a binary").is_err());
    assert!(elf_machine(b"\x7fELF").is_err());
}

#[test]
fn the_readme_names_the_version_and_architecture() {
    let text = readme("1.2.3", Arch::X86_64);
    assert!(text.starts_with("# autoproxy 1.2.3\n"), "{text}");
    assert!(text.contains("tar -xzf autoproxy-1.2.3.tar.gz && cd autoproxy-1.2.3"));
    assert!(text.contains("built for x86_64"));
    assert!(!text.contains('{'), "a placeholder left: {text}");
}

/// The first 64 bytes of an ELF executable for `arch`: what the bundle checks of a binary.
fn fake_elf(arch: Arch) -> Vec<u8> {
    let mut bytes = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
    bytes.resize(16, 0);
    bytes.extend(2u16.to_le_bytes());
    bytes.extend(arch.elf_machine().to_le_bytes());
    bytes.resize(64, 0);
    bytes
}

/// A workspace with the repository's templates and what `sam build` would leave, `machine`
/// being the binaries' architecture.
fn built_workspace(machine: Arch) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = crate::root();
    std::fs::create_dir_all(dir.path().join("docs")).unwrap();
    std::fs::copy(root.join("template.yaml"), dir.path().join("template.yaml")).unwrap();
    for companion in COMPANION_TEMPLATES {
        std::fs::copy(root.join(companion), dir.path().join(companion)).unwrap();
    }
    let template: Value =
        serde_yaml::from_str(&std::fs::read_to_string(root.join("template.yaml")).unwrap())
            .unwrap();
    let (_, artifacts) = bundle_template(&template, Arch::X86_64).unwrap();
    for artifact in artifacts {
        let built = dir.path().join(SAM_BUILD_DIR).join(&artifact.logical_id);
        std::fs::create_dir_all(&built).unwrap();
        std::fs::write(built.join(&artifact.executable), fake_elf(machine)).unwrap();
    }
    dir
}

#[test]
fn the_archive_holds_the_template_the_zips_the_companions_and_the_readme() {
    let workspace = built_workspace(Arch::X86_64);
    let archive = make_bundle(workspace.path(), "9.8.7", Arch::X86_64).unwrap();
    assert_eq!(
        archive,
        workspace.path().join("dist/autoproxy-9.8.7.tar.gz")
    );
    let listed = Command::new("tar")
        .arg("-tzf")
        .arg(&archive)
        .output()
        .unwrap();
    let mut names: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter(|name| !name.ends_with('/'))
        .map(str::to_owned)
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "autoproxy-9.8.7/README.md",
            "autoproxy-9.8.7/central-forwarding.yaml",
            "autoproxy-9.8.7/functions/AgentPublisherFunction.zip",
            "autoproxy-9.8.7/functions/ConfigureFunction.zip",
            "autoproxy-9.8.7/functions/GenerateFunction.zip",
            "autoproxy-9.8.7/layers/AgentLayer.zip",
            "autoproxy-9.8.7/member-account.yaml",
            "autoproxy-9.8.7/template.yaml",
        ]
    );
    let stage = workspace.path().join("dist/autoproxy-9.8.7");
    let (entries, binary) =
        zip_entry(&stage.join("layers/AgentLayer.zip"), "autoproxy-agent").unwrap();
    assert_eq!(entries, ["autoproxy-agent"]);
    assert_eq!(binary, fake_elf(Arch::X86_64));
    let text = std::fs::read_to_string(stage.join("template.yaml")).unwrap();
    assert!(text.starts_with("# autoproxy 9.8.7: "), "{text:.200}");
    let bundled: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(
        bundled["Resources"]["GenerateFunction"]["Properties"]["CodeUri"],
        "functions/GenerateFunction.zip"
    );
}

#[test]
fn a_build_for_another_architecture_is_refused() {
    let workspace = built_workspace(Arch::Arm64);
    let err = make_bundle(workspace.path(), "1.0.0", Arch::X86_64)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("expected an ELF for x86_64 (e_machine 0x3e), got e_machine 0xb7"),
        "{err}"
    );
}
