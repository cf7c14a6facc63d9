//! Guards `shared/hack` (voxpool-workspace-hack): every member builds each third-party
//! dependency with the same features as the whole workspace does, so `cargo test -p <one>`
//! after `make test` reuses every compiled dependency instead of rebuilding them. Reads the
//! resolved graphs with `cargo tree` (offline, from Cargo.lock).

use std::{
    collections::{BTreeMap, BTreeSet},
    process::Command,
};

use voxpool_e2e::workspace_root;

/// Package (`name vX.Y.Z`) → enabled features, for `cargo tree` run with `args`.
fn features(args: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "tree",
            "--offline",
            "-e",
            "normal,build,dev",
            "--prefix",
            "none",
        ])
        .args(["-f", "{p}|{f}"])
        .args(args)
        .output()
        .expect("cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut map: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((package, list)) = line.split_once('|') else {
            continue;
        };
        let package = package.replace(" (*)", "").trim().to_owned();
        let entry = map.entry(package).or_default();
        entry.extend(
            list.replace(" (*)", "")
                .split(',')
                .map(str::trim)
                .filter(|f| !f.is_empty())
                .map(str::to_owned),
        );
    }
    map
}

#[test]
fn every_member_builds_its_dependencies_with_the_workspaces_features() {
    let workspace = features(&["--workspace"]);
    assert!(
        workspace.keys().any(|p| p.starts_with("tokio v")),
        "the graph was read"
    );
    let members: Vec<String> = workspace
        .keys()
        .filter(|p| p.contains("(/") && !p.starts_with("voxpool-workspace-hack "))
        .map(|p| p.split(' ').next().unwrap_or_default().to_owned())
        .collect();
    assert!(members.len() >= 10, "the members were found: {members:?}");
    let mut differing = Vec::new();
    for member in &members {
        for (package, enabled) in features(&["-p", member]) {
            if package.contains("(/") {
                continue; // our own crates: rebuilt when they change anyway
            }
            if let Some(all) = workspace.get(&package).filter(|all| *all != &enabled) {
                let missing: Vec<_> = all.difference(&enabled).collect();
                differing.push(format!("{member}: {package} lacks {missing:?}"));
            }
        }
    }
    assert!(
        differing.is_empty(),
        "add these features to shared/hack/Cargo.toml (the workspace turns them on, these \
         packages alone do not, so testing one of them would rebuild the crate): {differing:#?}"
    );
}
