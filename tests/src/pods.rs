//! The Kubernetes manifests in `deploy/kubernetes`, run as they are: every
//! pod of the StatefulSet is a `plaudit-node` process started with exactly
//! its container's arguments and environment.
//!
//! ```text
//! kustomization.yaml ─ resources: the StatefulSet, the ConfigMap ─ secretGenerator: the keys
//! pod plaudit-N      ─ IP 127.0.83.(N+1), its DNS name in /etc/hosts (removed on drop)
//!                    ─ env: fieldRefs (metadata.name, metadata.namespace), HOSTNAME = pod name
//!                    ─ args: $(VAR) expanded as the kubelet does; a mount path -> the pod's
//!                      directory for that volume (data: kept like a PVC; ConfigMap and Secret
//!                      files written); 0.0.0.0 -> the pod's IP (each pod has its own)
//! ready              ─ the readiness probe's path on the named port
//! stop               ─ SIGTERM, a clean exit within terminationGracePeriodSeconds
//! ```
//!
//! What the test adds to the pods' environment is only `fault_injection`
//! (for the replica digests the history check compares). Names resolve
//! through `/etc/hosts`, so the test needs to be able to write it (root).

use crate::{http_get, wait_until, Cluster, Node};
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The first pod's IP; pod N has `POD_NET.(N+1)`.
const POD_NET: [u8; 3] = [127, 0, 83];
/// How long a pod may take to pass its readiness probe.
const POD_READY_TIMEOUT: Duration = Duration::from_secs(120);
const HOSTS: &str = "/etc/hosts";

/// What the test reads from the manifests.
#[derive(Debug, Clone)]
pub struct Manifests {
    /// The StatefulSet's name: pods are `<name>-<ordinal>`.
    pub name: String,
    /// Its headless Service (`serviceName`): pods' DNS names are
    /// `<pod>.<service>.<namespace>.svc.cluster.local`.
    pub service: String,
    pub replicas: u64,
    pub args: Vec<String>,
    /// `(name, value)`, or `(name, fieldRef path)` for a downward-API field.
    pub env: Vec<(String, EnvSource)>,
    /// Container port names -> numbers.
    pub ports: BTreeMap<String, u16>,
    /// `(mount path, volume)`.
    pub mounts: Vec<(String, Volume)>,
    /// The readiness probe's `(path, port number)`.
    pub readiness: (String, u16),
    pub grace: Duration,
}

#[derive(Debug, Clone)]
pub enum EnvSource {
    Value(String),
    Field(String),
}

/// A volume, with the files it holds.
#[derive(Debug, Clone)]
pub enum Volume {
    /// A claim from `volumeClaimTemplates`: the pod's own, kept.
    Claim,
    /// Files given to every pod (a ConfigMap's data, a Secret's keys), and
    /// the mode they get.
    Files(BTreeMap<String, String>, u32),
}

fn yaml(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()))
        })
        .collect()
}

fn text(v: &Value, what: &str) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => panic!("{what}: expected a string, got {v:?}"),
    }
}

fn list<'a>(v: &'a Value, what: &str) -> &'a [Value] {
    v.as_sequence().map(Vec::as_slice).unwrap_or_else(|| panic!("{what}: expected a list"))
}

impl Manifests {
    /// Reads `dir/kustomization.yaml` and the resources it lists; every
    /// Secret key named by its `secretGenerator` is given `secrets[key]`.
    pub fn load(dir: &Path, secrets: &BTreeMap<String, String>) -> Manifests {
        let kust = yaml(&dir.join("kustomization.yaml")).remove(0);
        let mut docs = Vec::new();
        for r in list(&kust["resources"], "resources") {
            docs.extend(yaml(&dir.join(text(r, "resource"))));
        }
        let of_kind =
            |kind: &'static str| docs.iter().filter(move |d| d["kind"].as_str() == Some(kind));
        let mut generated: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for g in list(&kust["secretGenerator"], "secretGenerator") {
            let files = list(&g["files"], "secretGenerator files").iter().map(|f| {
                let f = text(f, "secretGenerator file");
                let key = f.split_once('=').map_or(f.as_str(), |(k, _)| k).to_string();
                let value = secrets.get(&key).unwrap_or_else(|| panic!("no value for {key}"));
                (key, value.clone())
            });
            generated.insert(text(&g["name"], "secret name"), files.collect());
        }
        let config_maps: BTreeMap<String, BTreeMap<String, String>> = of_kind("ConfigMap")
            .map(|c| {
                let data = c["data"].as_mapping().expect("ConfigMap data");
                let files = data.iter().map(|(k, v)| (text(k, "key"), text(v, "value")));
                (text(&c["metadata"]["name"], "name"), files.collect())
            })
            .collect();
        let set = of_kind("StatefulSet").next().expect("a StatefulSet").clone();
        let spec = &set["spec"];
        let pod = &spec["template"]["spec"];
        let containers = list(&pod["containers"], "containers");
        assert_eq!(containers.len(), 1, "one container");
        let c = &containers[0];
        let claims: Vec<String> = list(&spec["volumeClaimTemplates"], "volumeClaimTemplates")
            .iter()
            .map(|t| text(&t["metadata"]["name"], "claim name"))
            .collect();
        let volume = |name: &str| -> Volume {
            if claims.iter().any(|c| c == name) {
                return Volume::Claim;
            }
            let v = list(&pod["volumes"], "volumes")
                .iter()
                .find(|v| v["name"].as_str() == Some(name))
                .unwrap_or_else(|| panic!("no volume {name}"));
            if let Some(cm) = v["configMap"]["name"].as_str() {
                Volume::Files(config_maps[cm].clone(), 0o644)
            } else if let Some(secret) = v["secret"]["secretName"].as_str() {
                let mode = file_mode(&v["secret"]["defaultMode"]);
                Volume::Files(generated[secret].clone(), mode)
            } else {
                panic!("volume {name}: only claims, ConfigMaps and Secrets are run here")
            }
        };
        let ports: BTreeMap<String, u16> = list(&c["ports"], "ports")
            .iter()
            .map(|p| (text(&p["name"], "port name"), p["containerPort"].as_u64().unwrap() as u16))
            .collect();
        let probe = &c["readinessProbe"]["httpGet"];
        let probe_port = match &probe["port"] {
            Value::Number(n) => n.as_u64().unwrap() as u16,
            named => ports[&text(named, "probe port")],
        };
        Manifests {
            name: text(&set["metadata"]["name"], "StatefulSet name"),
            service: text(&spec["serviceName"], "serviceName"),
            replicas: spec["replicas"].as_u64().expect("replicas"),
            args: list(&c["args"], "args").iter().map(|a| text(a, "arg")).collect(),
            env: list(&c["env"], "env")
                .iter()
                .map(|e| {
                    let name = text(&e["name"], "env name");
                    match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                        Some(path) => (name, EnvSource::Field(path.to_string())),
                        None => (name, EnvSource::Value(text(&e["value"], "env value"))),
                    }
                })
                .collect(),
            ports,
            mounts: list(&c["volumeMounts"], "volumeMounts")
                .iter()
                .map(|m| (text(&m["mountPath"], "mountPath"), volume(m["name"].as_str().unwrap())))
                .collect(),
            readiness: (text(&probe["path"], "probe path"), probe_port),
            grace: Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30)),
        }
    }

    /// Pod `ordinal`'s name.
    pub fn pod(&self, ordinal: u64) -> String {
        format!("{}-{ordinal}", self.name)
    }

    /// Pod `ordinal`'s DNS name in `namespace`.
    pub fn dns_name(&self, ordinal: u64, namespace: &str) -> String {
        format!("{}.{}.{namespace}.svc.cluster.local", self.pod(ordinal), self.service)
    }
}

/// A volume's `defaultMode`: Kubernetes reads YAML 1.1, where `0440` is
/// octal (serde_yaml, YAML 1.2, leaves it a string); 0644 when unset.
fn file_mode(v: &Value) -> u32 {
    match v {
        Value::Null => 0o644,
        Value::Number(n) => n.as_u64().expect("a mode") as u32,
        Value::String(s) if s.starts_with('0') => {
            u32::from_str_radix(s.trim_start_matches("0o"), 8).expect("an octal mode")
        }
        other => panic!("defaultMode {other:?}"),
    }
}

/// Expands `$(VAR)` references to `env` as the kubelet does (`$$` is a
/// literal `$`; an unknown reference stays as written).
pub fn expand(arg: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(r) = rest.strip_prefix("$$") {
            out.push('$');
            rest = r;
        } else if let Some((name, r)) = rest.strip_prefix("$(").and_then(|r| r.split_once(')')) {
            match env.get(name) {
                Some(v) => out.push_str(v),
                None => out.push_str(&rest[..name.len() + 3]),
            }
            rest = r;
        } else {
            out.push('$');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}

/// Names added to `/etc/hosts`, each line marked with this process's id;
/// removed on drop, and by the next run if this one was killed.
struct HostNames {
    mark: String,
}

const HOSTS_MARK: &str = "# plaudit-test-pods ";

impl HostNames {
    fn new() -> HostNames {
        // Lines of runs whose process is gone (killed before their drop).
        let stale = |line: &str| {
            line.rsplit_once(HOSTS_MARK)
                .and_then(|(_, pid)| pid.trim().parse::<u32>().ok())
                .is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        };
        rewrite_hosts(|line| !stale(line));
        HostNames { mark: format!("{HOSTS_MARK}{}", std::process::id()) }
    }

    /// Appends one line: a resolver reading the file meanwhile sees it
    /// whole or not at all, never an emptied file.
    fn add(&self, ip: Ipv4Addr, name: &str) {
        use std::io::Write;
        let text = std::fs::read(HOSTS).unwrap_or_else(|e| panic!("reading {HOSTS}: {e}"));
        let newline = if text.is_empty() || text.ends_with(b"\n") { "" } else { "\n" };
        let line = format!("{newline}{ip} {name} {}\n", self.mark);
        std::fs::OpenOptions::new()
            .append(true)
            .open(HOSTS)
            .and_then(|mut f| f.write_all(line.as_bytes()))
            .unwrap_or_else(|e| {
                panic!(
                    "the pods' DNS names go in {HOSTS}, which cannot be written ({e}): run as root"
                )
            });
    }
}

/// Rewrites `/etc/hosts` keeping the lines `keep` accepts; leaves it alone
/// if it cannot be read whole or nothing would change. In place: it may be
/// a bind mount (containers), which cannot be renamed over.
fn rewrite_hosts(keep: impl Fn(&str) -> bool) {
    let Ok(bytes) = std::fs::read(HOSTS) else { return };
    let Ok(text) = String::from_utf8(bytes) else { return };
    let kept: String = text.lines().filter(|l| keep(l)).map(|l| format!("{l}\n")).collect();
    if kept.lines().count() != text.lines().count() {
        let _ = std::fs::write(HOSTS, kept);
    }
}

impl Drop for HostNames {
    fn drop(&mut self) {
        rewrite_hosts(|line| !line.ends_with(&self.mark));
    }
}

/// The StatefulSet's pods as processes, in one cluster.
pub struct Pods {
    pub manifests: Manifests,
    namespace: String,
    /// Node `ordinal + 1` is pod `ordinal`; a pod scaled away stays in it,
    /// stopped, with its data (a PVC outlives its pod).
    pub cluster: Cluster,
    /// Pods running now: ordinals `0..replicas`.
    replicas: u64,
    admin_token: String,
    /// The CA of the pods' certificate (the Secret's `ca.crt`), if any.
    client_ca: Option<std::path::PathBuf>,
    /// Each volume of `Files` written once, shared by every pod.
    files: tempfile::TempDir,
    hosts: HostNames,
}

impl Pods {
    /// Applies the manifests in `dir` in `namespace`: starts the
    /// StatefulSet's pods together (`podManagementPolicy: Parallel`) and
    /// waits until every one is ready. `secrets` gives the Secret's keys.
    pub fn apply(dir: &Path, namespace: &str, secrets: BTreeMap<String, String>) -> Pods {
        let manifests = Manifests::load(dir, &secrets);
        // As the node reads its file: surrounding whitespace is no part of it.
        let admin_token = secrets.get("admin-token").expect("an admin token").trim().to_string();
        let files = tempfile::Builder::new().prefix("plaudit-pod-files-").tempdir().unwrap();
        for (i, (_, volume)) in manifests.mounts.iter().enumerate() {
            if let Volume::Files(data, mode) = volume {
                let dir = files.path().join(format!("volume-{i}"));
                std::fs::create_dir_all(&dir).unwrap();
                for (name, body) in data {
                    let path = dir.join(name);
                    std::fs::write(&path, body).unwrap();
                    use std::os::unix::fs::PermissionsExt;
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
                        .unwrap();
                }
            }
        }
        let secret_dir = tempfile::tempdir().unwrap();
        let token = Some(admin_token.clone());
        // The cluster's CA, when the Secret has one: what clients trust.
        let client_ca = secrets.get("ca.crt").map(|pem| {
            let path = files.path().join("client-ca.pem");
            std::fs::write(&path, pem).unwrap();
            path
        });
        let mut pods = Pods {
            namespace: namespace.to_string(),
            client_ca: client_ca.clone(),
            cluster: Cluster::of_nodes(Vec::new(), secret_dir, 0, token, client_ca),
            replicas: 0,
            admin_token,
            files,
            hosts: HostNames::new(),
            manifests,
        };
        let n = pods.manifests.replicas;
        pods.scale(n);
        pods
    }

    /// Pod `ordinal`'s IP.
    pub fn ip(ordinal: u64) -> Ipv4Addr {
        let last = u8::try_from(ordinal + 1).expect("at most 254 pods");
        Ipv4Addr::new(POD_NET[0], POD_NET[1], POD_NET[2], last)
    }

    /// Pods running now.
    pub fn replicas(&self) -> u64 {
        self.replicas
    }

    /// `kubectl scale --replicas=n`: new ordinals start together and are
    /// waited for; the highest ordinals above `n` stop (SIGTERM, within
    /// the grace period), keeping their data.
    pub fn scale(&mut self, n: u64) {
        while self.replicas > n {
            self.replicas -= 1;
            let grace = self.manifests.grace;
            self.cluster.node_mut(self.replicas + 1).terminate_within(grace);
        }
        let new: Vec<u64> = (self.replicas..n).collect();
        for &ordinal in &new {
            if ordinal as usize >= self.cluster.ids().len() {
                let node = self.make_pod(ordinal);
                self.cluster.push(node);
            }
            let node = self.cluster.node_mut(ordinal + 1);
            node.start_again();
        }
        self.replicas = n;
        for &ordinal in &new {
            self.wait_ready(ordinal);
        }
    }

    /// `kubectl rollout restart`: the StatefulSet's rolling update, highest
    /// ordinal first, each pod stopped (SIGTERM), started and ready before
    /// the next.
    pub fn rolling_restart(&mut self) {
        let grace = self.manifests.grace;
        for ordinal in (0..self.replicas).rev() {
            let node = self.cluster.node_mut(ordinal + 1);
            node.terminate_within(grace);
            node.start_again();
            self.wait_ready(ordinal);
        }
    }

    /// Waits until pod `ordinal` passes its readiness probe.
    pub fn wait_ready(&mut self, ordinal: u64) {
        let (path, port) = self.manifests.readiness.clone();
        let probe = SocketAddr::from((Pods::ip(ordinal), port));
        let node = self.cluster.node_mut(ordinal + 1);
        let deadline = Instant::now() + POD_READY_TIMEOUT;
        while !matches!(http_get(probe, &path), Ok((200, _))) {
            if let Some(status) = node.exited() {
                node.fail(&format!("pod {ordinal} exited with {status} before it was ready"));
            }
            if Instant::now() > deadline {
                node.fail(&format!("pod {ordinal} not ready within {POD_READY_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `plaudit admin nodes` lists pod `ordinal`'s node in
    /// `state`, through pod 0.
    pub async fn wait_state(&self, ordinal: u64, state: &str, timeout: Duration) {
        let what = format!("node {} {state}", ordinal + 1);
        wait_until(timeout, &what, || async {
            self.cluster.nodes(1).get(&(ordinal + 1)).is_some_and(|n| n["state"] == state)
        })
        .await;
    }

    /// The admin token the pods were given.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// Pod `ordinal` as a process, not started: the container's command
    /// line with this pod's environment, volumes and IP.
    fn make_pod(&mut self, ordinal: u64) -> Node {
        let m = &self.manifests;
        let pod = m.pod(ordinal);
        let ip = Pods::ip(ordinal);
        self.hosts.add(ip, &m.dns_name(ordinal, &self.namespace));
        let port = |name: &str| {
            let p = *m.ports.get(name).unwrap_or_else(|| panic!("no container port {name}"));
            SocketAddr::from((ip, p))
        };
        let mut env: Vec<(String, String)> = Vec::new();
        for (name, source) in &m.env {
            let value = match source {
                EnvSource::Value(v) => v.clone(),
                EnvSource::Field(f) if f == "metadata.name" => pod.clone(),
                EnvSource::Field(f) if f == "metadata.namespace" => self.namespace.clone(),
                EnvSource::Field(f) => panic!("fieldRef {f} is not run here"),
            };
            env.push((name.clone(), value));
        }
        env.push(("HOSTNAME".into(), pod.clone()));
        // The test's one addition: the replica digests it compares.
        env.push(("PLAUDIT_FAULT_INJECTION".into(), "true".into()));
        let vars: BTreeMap<String, String> = env.iter().cloned().collect();
        let addrs = (port("client"), port("admin"), port("peer"));
        let mut node = Node::new(ordinal + 1, 0, addrs, Vec::new(), env);
        // Longest mount path first, so that /etc/plaudit-secrets is not
        // taken for /etc/plaudit.
        let mut mounts: Vec<(&String, PathBuf)> = m
            .mounts
            .iter()
            .enumerate()
            .map(|(i, (path, volume))| {
                let local = match volume {
                    Volume::Claim => node.data_dir().to_path_buf(),
                    Volume::Files(..) => self.files.path().join(format!("volume-{i}")),
                };
                (path, local)
            })
            .collect();
        mounts.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
        let args = m
            .args
            .iter()
            .map(|a| {
                let mut a = expand(a, &vars).replace("0.0.0.0:", &format!("{ip}:"));
                for (path, local) in &mounts {
                    a = replace_path(&a, path, local);
                }
                a
            })
            .collect();
        node.set_exact_args(args);
        node.set_token(&self.admin_token);
        if let Some(ca) = &self.client_ca {
            node.set_tls_ca(ca);
        }
        node
    }
}

/// `arg` with `path` (a whole path prefix: followed by `/` or the end)
/// replaced by `local`.
fn replace_path(arg: &str, path: &str, local: &Path) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(i) = rest.find(path) {
        let after = &rest[i + path.len()..];
        out.push_str(&rest[..i]);
        if after.is_empty() || after.starts_with('/') {
            out.push_str(&local.to_string_lossy());
        } else {
            out.push_str(path);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_expand_as_the_kubelet_does() {
        let env: BTreeMap<String, String> =
            [("POD_NAME".to_string(), "plaudit-2".to_string())].into_iter().collect();
        assert_eq!(
            expand("--advertise=$(POD_NAME).plaudit", &env),
            "--advertise=plaudit-2.plaudit"
        );
        assert_eq!(expand("$(NOPE) $$(POD_NAME) $x", &env), "$(NOPE) $(POD_NAME) $x");
    }

    #[test]
    fn modes_read_as_kubernetes_reads_them() {
        let v: Value = serde_yaml::from_str("a: 0440\nb: 288\nc: 0o440").unwrap();
        assert_eq!([file_mode(&v["a"]), file_mode(&v["b"]), file_mode(&v["c"])], [0o440; 3]);
        assert_eq!(file_mode(&v["none"]), 0o644);
    }

    #[test]
    fn a_mount_path_is_replaced_only_as_a_whole_prefix() {
        let local = Path::new("/tmp/v1");
        assert_eq!(
            replace_path("--config=/etc/plaudit/p.toml", "/etc/plaudit", local),
            "--config=/tmp/v1/p.toml"
        );
        assert_eq!(
            replace_path("--f=/etc/plaudit-secrets/x", "/etc/plaudit", local),
            "--f=/etc/plaudit-secrets/x"
        );
        assert_eq!(
            replace_path("--data-dir=/var/lib/plaudit", "/var/lib/plaudit", local),
            "--data-dir=/tmp/v1"
        );
    }
}
