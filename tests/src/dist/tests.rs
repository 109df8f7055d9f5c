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
  ProxyImage:
    Type: AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>
  ProxyImageArm64:
    Type: AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>
Conditions:
  FleetIsX86: !Equals [!Ref ProxyArchitecture, x86_64]
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
      Description: Scans Route53.
      Layers: [!Ref AgentLayer]
  ProxyLaunchTemplate:
    Type: AWS::EC2::LaunchTemplate
    Properties:
      LaunchTemplateData:
        ImageId: !If [FleetIsX86, !Ref ProxyImage, !Ref ProxyImageArm64]
        InstanceType: !If [FleetIsX86, t3.small, !If [FleetIsX86, x, t4g.small]]
  AgentLayer:
    Type: AWS::Serverless::LayerVersion
    Metadata:
      BuildMethod: makefile
      ContextPath: .
    Properties:
      ContentUri: functions/agent
      CompatibleArchitectures: [arm64, x86_64]
  GenerateOnDeployFunction:
    Type: AWS::Lambda::Function
    Properties:
      Description: Runs the generator once.
  GenerateOnDeploy:
    Type: Custom::AutoproxyGenerateOnDeploy
    Properties:
      ServiceToken: !GetAtt GenerateOnDeployFunction.Arn
      Release: source build
  ConfigBucket:
    Type: AWS::S3::Bucket
"#;

const RELEASE: Release = Release {
    version: "1.2.3",
    commit: "0123456789abcdef0123456789abcdef01234567",
};

fn bundled(text: &str, arch: Arch) -> Result<(Value, Vec<Artifact>), DistError> {
    bundle_template(&serde_yaml::from_str(text).unwrap(), arch, &RELEASE)
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
fn the_template_offers_the_built_architecture_alone_and_reads_no_other_image() {
    let (template, _) = bundled(TEMPLATE, Arch::X86_64).unwrap();
    for name in ["Architecture", "ProxyArchitecture"] {
        let parameter = &template["Parameters"][name];
        assert_eq!(parameter["Default"], "x86_64", "{name}");
        assert_eq!(
            parameter["AllowedValues"],
            Value::Sequence(vec!["x86_64".into()]),
            "{name}"
        );
    }
    assert!(
        template.get("Rules").is_none(),
        "no rule needed: {template:?}"
    );
    let parameters = template["Parameters"].as_mapping().unwrap();
    assert!(parameters.contains_key("ProxyImage"));
    assert!(
        !parameters.contains_key("ProxyImageArm64"),
        "{parameters:?}"
    );
    assert!(template["Conditions"].get("FleetIsX86").is_none());
    let data = &template["Resources"]["ProxyLaunchTemplate"]["Properties"]["LaunchTemplateData"];
    assert_eq!(
        serde_yaml::to_string(&data["ImageId"]).unwrap(),
        "!Ref ProxyImage\n"
    );
    assert_eq!(data["InstanceType"], "t3.small");
    assert_eq!(
        template["Resources"]["AgentLayer"]["Properties"]["CompatibleArchitectures"],
        Value::Sequence(vec!["x86_64".into()])
    );
    // On arm64, the other branch and the other image.
    let (template, _) = bundled(TEMPLATE, Arch::Arm64).unwrap();
    let data = &template["Resources"]["ProxyLaunchTemplate"]["Properties"]["LaunchTemplateData"];
    assert_eq!(data["InstanceType"], "t4g.small");
    assert!(
        !template["Parameters"]
            .as_mapping()
            .unwrap()
            .contains_key("ProxyImage")
    );
    // A use the narrowing cannot resolve is refused, not shipped.
    let kept = TEMPLATE.replace(
        "  ConfigBucket:\n",
        "  ConfigBucket:\n    Condition: FleetIsX86\n",
    );
    let err = bundled(&kept, Arch::X86_64).unwrap_err().to_string();
    assert!(err.contains("FleetIsX86 is still used"), "{err}");
}

#[test]
fn the_release_is_stamped_in_the_description_the_outputs_and_each_function() {
    let text = TEMPLATE.replace("Transform:", "Description: >\n  The stack.\nTransform:");
    let (template, _) = bundled(&text, Arch::X86_64).unwrap();
    assert_eq!(
        template["Description"],
        "The stack.\nRelease 1.2.3 (commit 0123456789abcdef0123456789abcdef01234567), the release \
         bundle for x86_64.\n"
    );
    assert_eq!(template["Outputs"]["ReleaseVersion"]["Value"], "1.2.3");
    assert_eq!(
        template["Outputs"]["ReleaseCommit"]["Value"],
        "0123456789abcdef0123456789abcdef01234567"
    );
    let resources = &template["Resources"];
    for (id, described) in [
        ("GenerateFunction", "Scans Route53."),
        ("GenerateOnDeployFunction", "Runs the generator once."),
        ("AgentLayer", ""),
    ] {
        let stamped = format!("{described} autoproxy 1.2.3 (0123456789ab).");
        assert_eq!(
            resources[id]["Properties"]["Description"],
            stamped.trim_start(),
            "{id}"
        );
    }
    // A new release is a change of the custom resource's properties: the deploy runs the
    // generator again, even when no setting changed.
    assert_eq!(
        resources["GenerateOnDeploy"]["Properties"]["Release"],
        "1.2.3 (commit 0123456789abcdef0123456789abcdef01234567)"
    );
    let dirty = Release {
        commit: "0123456789abcdef0123456789abcdef01234567-dirty",
        ..RELEASE
    };
    let (template, _) = bundle_template(
        &serde_yaml::from_str(TEMPLATE).unwrap(),
        Arch::X86_64,
        &dirty,
    )
    .unwrap();
    assert_eq!(
        template["Resources"]["GenerateFunction"]["Properties"]["Description"],
        "Scans Route53. autoproxy 1.2.3 (0123456789ab-dirty)."
    );
    let long = TEMPLATE.replace("Scans Route53.", &"x".repeat(240));
    let err = bundled(&long, Arch::X86_64).unwrap_err().to_string();
    assert!(err.contains("at most 256 characters once stamped"), "{err}");
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
    // The template with one text replaced, for one architecture: what the refusal names.
    for (from, to, arch, expected) in [
        (
            "AllowedValues: [arm64, x86_64]",
            "AllowedValues: [arm64]",
            Arch::X86_64,
            "parameter Architecture does not offer x86_64",
        ),
        (
            "BuildMethod: makefile",
            "BuildMethod: go1.x",
            Arch::X86_64,
            "AgentLayer: expected a rust-cargolambda function or a makefile layer",
        ),
        (
            "        Binary: autoproxy-generate\n",
            "        Other: x\n",
            Arch::X86_64,
            "GenerateFunction: rust-cargolambda without BuildProperties.Binary",
        ),
        // A function without a build leaned on Globals' CodeUri, which the bundle drops.
        (
            "      BuildMethod: rust-cargolambda\n",
            "",
            Arch::X86_64,
            "GenerateFunction: a function with neither a build method nor CodeUri/InlineCode",
        ),
        (
            "      BuildMethod: makefile\n",
            "",
            Arch::Arm64,
            "no layer built by sam build",
        ),
    ] {
        let err = bundled(&TEMPLATE.replace(from, to), arch)
            .unwrap_err()
            .to_string();
        assert!(err.contains(expected), "{expected:?} not in {err:?}");
    }
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
    let text = readme(&RELEASE, Arch::X86_64);
    assert!(text.starts_with("# autoproxy 1.2.3\n"), "{text}");
    assert!(text.contains("tar -xzf autoproxy-1.2.3.tar.gz && cd autoproxy-1.2.3"));
    assert!(text.contains("for **x86_64**"));
    assert!(text.contains("(commit `0123456789abcdef0123456789abcdef01234567`)"));
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
    for carried in CARRIED {
        std::fs::copy(root.join(carried), dir.path().join(carried)).unwrap();
    }
    std::fs::create_dir_all(dir.path().join("dist")).unwrap();
    std::fs::write(dir.path().join(NOTICES.0), "notices\n").unwrap();
    let template: Value =
        serde_yaml::from_str(&std::fs::read_to_string(root.join("template.yaml")).unwrap())
            .unwrap();
    let (_, artifacts) = bundle_template(&template, Arch::X86_64, &RELEASE).unwrap();
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
    let release = Release {
        version: "9.8.7",
        ..RELEASE
    };
    let archive = make_bundle(workspace.path(), &release, Arch::X86_64).unwrap();
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
            "autoproxy-9.8.7/CHANGELOG.md",
            "autoproxy-9.8.7/LICENSE",
            "autoproxy-9.8.7/README.md",
            "autoproxy-9.8.7/THIRD-PARTY-NOTICES.md",
            "autoproxy-9.8.7/docs/ARCHITECTURE.md",
            "autoproxy-9.8.7/docs/BENCHMARKS.md",
            "autoproxy-9.8.7/docs/DEPLOY.md",
            "autoproxy-9.8.7/docs/RUNBOOK.md",
            "autoproxy-9.8.7/docs/central-forwarding.yaml",
            "autoproxy-9.8.7/docs/member-account.yaml",
            "autoproxy-9.8.7/functions/AgentPublisherFunction.zip",
            "autoproxy-9.8.7/functions/ConfigureFunction.zip",
            "autoproxy-9.8.7/functions/FleetReportFunction.zip",
            "autoproxy-9.8.7/functions/GenerateFunction.zip",
            "autoproxy-9.8.7/layers/AgentLayer.zip",
            "autoproxy-9.8.7/template.yaml",
        ]
    );
    // The checksum file beside the archive, as sha256sum -c reads it.
    let check = Command::new("sha256sum")
        .args(["-c", CHECKSUMS])
        .current_dir(workspace.path().join("dist"))
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    assert_eq!(
        String::from_utf8_lossy(&check.stdout),
        "autoproxy-9.8.7.tar.gz: OK\n"
    );
    let stage = workspace.path().join("dist/autoproxy-9.8.7");
    let (entries, binary) =
        zip_entry(&stage.join("layers/AgentLayer.zip"), "autoproxy-agent").unwrap();
    assert_eq!(entries, ["autoproxy-agent"]);
    assert_eq!(binary, fake_elf(Arch::X86_64));
    let text = std::fs::read_to_string(stage.join("template.yaml")).unwrap();
    assert!(
        text.starts_with("# autoproxy 9.8.7 (commit 0123456789abcdef0123456789abcdef01234567): "),
        "{text:.200}"
    );
    let bundled: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(
        bundled["Resources"]["GenerateFunction"]["Properties"]["CodeUri"],
        "functions/GenerateFunction.zip"
    );
}

#[test]
fn a_build_for_another_architecture_is_refused() {
    let workspace = built_workspace(Arch::Arm64);
    let err = make_bundle(workspace.path(), &RELEASE, Arch::X86_64)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("expected an ELF for x86_64 (e_machine 0x3e), got e_machine 0xb7"),
        "{err}"
    );
}
