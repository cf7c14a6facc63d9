//! deploy/ cannot be run here (no Docker engine), so it is validated: every YAML file parses,
//! the compose file references only files that exist and pinned images, the Kubernetes
//! manifests have gRPC probes and only reference keys the Secret/ConfigMap define, and every
//! embedded voxpool config passes the services' own validation.

use std::{collections::BTreeSet, path::Path};

use serde_yaml_ng::Value;
use voxpool_config::{Config, Credentials};
use voxpool_e2e::workspace_root;

fn docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            let mut v: Value = serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            v.apply_merge()
                .unwrap_or_else(|e| panic!("{}: merge keys: {e}", path.display()));
            v
        })
        .collect()
}

fn yaml_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

#[test]
fn every_yaml_file_in_deploy_parses() {
    let mut files = Vec::new();
    yaml_files(&workspace_root().join("deploy"), &mut files);
    assert!(files.len() >= 6, "{files:?}");
    for f in files {
        assert!(!docs(&f).is_empty(), "{} is empty", f.display());
    }
}

#[test]
fn compose_references_only_existing_files_and_pinned_images() {
    let deploy = workspace_root().join("deploy");
    let compose = &docs(&deploy.join("docker-compose.yml"))[0];
    let services = compose["services"].as_mapping().expect("services");
    let names: BTreeSet<&str> = services.keys().map(s).collect();
    for want in [
        "redis",
        "postgres",
        "otel-collector",
        "scheduler",
        "catalog",
        "synthesis",
        "redis-jobs",
        "jobs",
    ] {
        assert!(names.contains(want), "compose lacks {want}");
    }
    for (name, svc) in services {
        let name = s(name);
        if let Some(build) = svc.get("build") {
            let ctx = deploy.join(s(&build["context"]));
            assert!(
                ctx.join(s(&build["dockerfile"])).exists(),
                "{name}: dockerfile missing"
            );
        }
        let image = s(&svc["image"]);
        assert!(
            image.contains(':') && !image.ends_with(":latest"),
            "{name}: image {image:?} must be pinned"
        );
        for vol in svc
            .get("volumes")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            let host = s(vol).split(':').next().unwrap();
            if host.starts_with('.') {
                assert!(
                    deploy.join(host).exists(),
                    "{name}: volume source {host} missing"
                );
            }
        }
        if let Some(deps) = svc.get("depends_on") {
            let deps: Vec<&str> = match deps {
                Value::Sequence(seq) => seq.iter().map(s).collect(),
                Value::Mapping(m) => m.keys().map(s).collect(),
                _ => vec![],
            };
            for d in deps {
                assert!(names.contains(d), "{name} depends on unknown service {d}");
            }
        }
        for arg in svc
            .get("command")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
        {
            if let Some(file) = s(arg).strip_prefix("/etc/voxpool/") {
                assert!(
                    deploy.join("config").join(file).exists(),
                    "{name}: /etc/voxpool/{file} not in deploy/config"
                );
            }
        }
    }
    assert_eq!(
        services["scheduler"]["deploy"]["replicas"].as_u64(),
        Some(2)
    );
    assert_eq!(
        services["synthesis"]["deploy"]["replicas"].as_u64(),
        Some(2)
    );
    assert_eq!(services["jobs"]["deploy"]["replicas"].as_u64(), Some(2));
    let dockerfile = std::fs::read_to_string(deploy.join("Dockerfile")).unwrap();
    for bin in [
        "voxpool-scheduler",
        "voxpool-catalog",
        "voxpool-synthesis",
        "voxpool-jobs",
        "voxctl",
    ] {
        assert!(
            dockerfile.contains(&format!("target/release/{bin}")),
            "Dockerfile does not ship {bin}"
        );
    }
}

#[test]
fn kubernetes_manifests_probe_over_grpc_and_reference_defined_keys() {
    let k8s = workspace_root().join("deploy/k8s");
    let secret = &docs(&k8s.join("secret.example.yaml"))[0];
    let secret_keys: BTreeSet<&str> = secret["stringData"]
        .as_mapping()
        .unwrap()
        .keys()
        .map(s)
        .collect();
    let configmap = &docs(&k8s.join("configmap.yaml"))[0];
    let config_toml = s(&configmap["data"]["config.toml"]);
    let config = Config::from_toml_str(config_toml).expect("configmap config.toml parses");
    config
        .validate(Credentials::Ignore)
        .expect("configmap config.toml validates");
    let mut deployments = 0;
    let mut kinds = BTreeSet::new();
    for file in [
        "scheduler.yaml",
        "catalog.yaml",
        "synthesis.yaml",
        "jobs.yaml",
    ] {
        for doc in docs(&k8s.join(file)) {
            kinds.insert(s(&doc["kind"]).to_owned());
            if s(&doc["kind"]) != "Deployment" {
                continue;
            }
            deployments += 1;
            let spec = &doc["spec"]["template"]["spec"];
            for c in spec["containers"].as_sequence().unwrap() {
                for probe in ["readinessProbe", "livenessProbe"] {
                    assert!(
                        c[probe]["grpc"]["port"].as_u64().is_some(),
                        "{file}: {probe} must be a gRPC probe"
                    );
                }
                let listen = c["env"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .find(|e| s(&e["name"]) == "VOXPOOL_LISTEN");
                assert!(
                    s(&listen.expect("VOXPOOL_LISTEN set")["value"]).starts_with("0.0.0.0:"),
                    "{file}: must listen on all interfaces"
                );
            }
            let all = spec["containers"]
                .as_sequence()
                .unwrap()
                .iter()
                .chain(spec["initContainers"].as_sequence().into_iter().flatten());
            for c in all {
                for e in c["env"].as_sequence().into_iter().flatten() {
                    if let Some(r) = e.get("valueFrom").and_then(|v| v.get("secretKeyRef")) {
                        assert!(
                            secret_keys.contains(s(&r["key"])),
                            "{file}: secret key {} undefined",
                            s(&r["key"])
                        );
                    }
                }
            }
            for v in spec["volumes"].as_sequence().into_iter().flatten() {
                if let Some(cm) = v.get("configMap") {
                    assert_eq!(s(&cm["name"]), s(&configmap["metadata"]["name"]), "{file}");
                }
            }
        }
    }
    assert_eq!(deployments, 4);
    for kind in ["Deployment", "Service", "PodDisruptionBudget"] {
        assert!(kinds.contains(kind), "missing {kind}");
    }
    // Client tokens: every one the config references is in the Secret and given to each
    // Deployment that accepts it, and synthesis presents one to the scheduler.
    let env_of = |file: &str| -> BTreeSet<String> {
        docs(&k8s.join(file))
            .iter()
            .filter(|d| s(&d["kind"]) == "Deployment")
            .flat_map(|d| {
                d["spec"]["template"]["spec"]["containers"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .flat_map(|c| c["env"].as_sequence().into_iter().flatten())
                    .map(|e| s(&e["name"]).to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    };
    assert!(
        !config.client_tokens.is_empty(),
        "the k8s config authenticates callers"
    );
    for entry in &config.client_tokens {
        let voxpool_config::CredentialRef::Env(var) = &entry.token else {
            continue;
        };
        assert!(
            secret_keys.contains(var.as_str()),
            "client token {var} not in the Secret"
        );
        for (service, file) in [
            (voxpool_config::DataPlane::Scheduler, "scheduler.yaml"),
            (voxpool_config::DataPlane::Synthesis, "synthesis.yaml"),
            (voxpool_config::DataPlane::Jobs, "jobs.yaml"),
        ] {
            if entry.accepted_by(service) {
                assert!(env_of(file).contains(var), "{file} lacks {var}");
            }
        }
    }
    assert!(env_of("synthesis.yaml").contains("VOXPOOL_CLIENT_TOKEN"));
    // ...and jobs presents one to synthesis, which accepts it.
    assert!(env_of("jobs.yaml").contains("VOXPOOL_CLIENT_TOKEN"));
    assert!(
        config
            .client_tokens
            .iter()
            .any(|t| t.name == "jobs" && t.accepted_by(voxpool_config::DataPlane::Synthesis)),
        "synthesis accepts the jobs token"
    );
    // Every credential the config references is provided by the Secret.
    for pool in &config.pools {
        for up in &pool.upstreams {
            for key in &up.keys {
                if let Some(voxpool_config::CredentialRef::Env(var)) = &key.credential {
                    assert!(
                        secret_keys.contains(var.as_str()),
                        "credential env {var} not in the Secret"
                    );
                }
            }
        }
    }
}

#[test]
fn collector_config_receives_otlp_and_exports_prometheus() {
    let c = &docs(&workspace_root().join("deploy/otel-collector.yaml"))[0];
    assert!(c["receivers"]["otlp"]["protocols"]["grpc"].is_mapping());
    let metrics = c["service"]["pipelines"]["metrics"]["exporters"]
        .as_sequence()
        .unwrap();
    assert!(metrics.iter().any(|e| s(e) == "prometheus"));
    assert!(metrics.iter().any(|e| s(e) == "debug"));
}

/// The schedulers' stores are the replicated form (docs/OPERATIONS.md, "Failover guarantee"): the compose
/// stack's and the example Secret's point at Sentinel, and Redis keeps no stale state across a
/// restart (no persistence).
#[test]
fn deploy_runs_the_lease_store_on_sentinel_without_persistence() {
    let deploy = workspace_root().join("deploy");
    let compose = &docs(&deploy.join("docker-compose.yml"))[0];
    let services = &compose["services"];
    let args: Vec<&str> = services["scheduler"]["command"]
        .as_sequence()
        .expect("scheduler command")
        .iter()
        .map(s)
        .collect();
    let store = args
        .iter()
        .position(|a| *a == "--store")
        .and_then(|i| args.get(i + 1))
        .expect("--store");
    assert!(
        store.starts_with("redis-sentinel://") && store.ends_with("#voxpool"),
        "{store}"
    );
    for host in store["redis-sentinel://".len()..store.len() - "#voxpool".len()].split(',') {
        let name = host.split(':').next().unwrap_or_default();
        assert!(
            services.get(name).is_some(),
            "--store names {name}, which compose does not run"
        );
    }
    for node in ["redis", "redis-replica"] {
        let command: Vec<&str> = services[node]["command"]
            .as_sequence()
            .expect("redis command")
            .iter()
            .map(s)
            .collect();
        let joined = command.join(" ");
        assert!(
            joined.contains("--appendonly no") && command.windows(2).any(|w| w == ["--save", ""]),
            "{node}: {joined}"
        );
    }
    let secret = &docs(&deploy.join("k8s/secret.example.yaml"))[0];
    let store = s(&secret["stringData"]["VOXPOOL_STORE"]);
    assert!(
        store.starts_with("redis-sentinel://") && store.contains('#'),
        "{store}"
    );
}

#[test]
fn the_catalog_reads_the_pools_config_everywhere_it_is_deployed() {
    let deploy = workspace_root().join("deploy");
    let compose = &docs(&deploy.join("docker-compose.yml"))[0];
    let command: Vec<&str> = compose["services"]["catalog"]["command"]
        .as_sequence()
        .expect("catalog command")
        .iter()
        .map(s)
        .collect();
    let at = command.iter().position(|a| *a == "--config");
    let path = at
        .and_then(|i| command.get(i + 1))
        .expect("compose catalog gets --config");
    let local = path.replace("/etc/voxpool", &deploy.join("config").display().to_string());
    assert!(
        std::path::Path::new(&local).exists(),
        "compose: {path} is not in deploy/config"
    );

    let catalog = docs(&deploy.join("k8s/catalog.yaml"))
        .into_iter()
        .find(|d| s(&d["kind"]) == "Deployment")
        .expect("catalog deployment");
    let spec = &catalog["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(s)
        .collect();
    assert_eq!(args, ["--config", "/etc/voxpool/config.toml"]);
    let mounted = container["volumeMounts"]
        .as_sequence()
        .expect("volumeMounts")
        .iter()
        .any(|m| s(&m["mountPath"]) == "/etc/voxpool");
    assert!(mounted, "k8s: the config map is mounted at /etc/voxpool");
}

/// The jobs queue is not the lease store: its own Redis, with persistence (a queued job must
/// survive a restart; docs/JOBS.md), in compose and in the example Secret.
#[test]
fn jobs_keep_their_queue_in_a_persistent_redis_of_their_own() {
    let deploy = workspace_root().join("deploy");
    let compose = &docs(&deploy.join("docker-compose.yml"))[0];
    let services = &compose["services"];
    let args: Vec<&str> = services["jobs"]["command"]
        .as_sequence()
        .expect("jobs command")
        .iter()
        .map(s)
        .collect();
    let store = args
        .iter()
        .position(|a| *a == "--store")
        .and_then(|i| args.get(i + 1))
        .expect("--store");
    assert_eq!(*store, "redis://redis-jobs:6379");
    let redis: Vec<&str> = services["redis-jobs"]["command"]
        .as_sequence()
        .expect("redis-jobs command")
        .iter()
        .map(s)
        .collect();
    assert!(
        redis.windows(2).any(|w| w == ["--appendonly", "yes"]),
        "{redis:?}"
    );
    let jobs = docs(&deploy.join("k8s/jobs.yaml"))
        .into_iter()
        .find(|d| s(&d["kind"]) == "Deployment")
        .expect("jobs deployment");
    let env = jobs["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .expect("env")
        .clone();
    let store = env
        .iter()
        .find(|e| s(&e["name"]) == "VOXPOOL_STORE")
        .expect("VOXPOOL_STORE");
    assert_eq!(
        s(&store["valueFrom"]["secretKeyRef"]["key"]),
        "VOXPOOL_JOBS_STORE",
        "not the scheduler's lease store"
    );
    let secret = &docs(&deploy.join("k8s/secret.example.yaml"))[0];
    assert_ne!(
        s(&secret["stringData"]["VOXPOOL_JOBS_STORE"]),
        s(&secret["stringData"]["VOXPOOL_STORE"])
    );
}
