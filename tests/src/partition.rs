//! Real network partitions on loopback, made by the kernel: one node runs
//! as a Unix user of its own, and iptables drops its peer traffic both ways
//! by port and by that user, so packets vanish without a reset, as in a
//! real network split (the in-process seam, `POST /fault/links`, closes
//! connections instead, which a peer sees at once).
//!
//! ```text
//! INPUT  -p tcp --dport P1 -j DROP                                    what others send to its peer port
//! OUTPUT -m owner --uid-owner U -p tcp -m multiport --dports P2,P3 -j DROP   what it sends to theirs
//! OUTPUT -m owner --uid-owner U -p tcp --sport P1 -j DROP             what it answers from its own
//! ```
//!
//! Client ports are untouched: a client still reaches the isolated node,
//! which is what a partition between racks looks like to an application
//! server in the minority's rack. Rules name only this test's ports, so
//! tests running side by side share the user and never touch each other's
//! traffic; a `KernelCut` removes exactly its own rules when dropped.
//!
//! Needs root and iptables (`scripts/test.sh` installs it); the user is
//! made on first use. The node binary is copied where that user can run it
//! (`/root` is closed to other users).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The Unix user an isolated node runs as.
pub const USER: &str = "plaudit-part";

/// `(uid, gid)` of [`USER`], made if missing; `Err` says why a kernel
/// partition cannot be made here (not root, no iptables).
pub fn user() -> Result<(u32, u32), String> {
    static USER_IDS: OnceLock<Result<(u32, u32), String>> = OnceLock::new();
    USER_IDS
        .get_or_init(|| {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Err("kernel partitions need root".into());
            }
            run("iptables", &["-L", "-n"]).map_err(|e| format!("iptables: {e}"))?;
            if id("-u").is_err() {
                // Two test processes may race to make it: the loser's
                // failure is fine if the user exists afterwards.
                let _ = run(
                    "useradd",
                    &["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                );
            }
            Ok((id("-u")?, id("-g")?))
        })
        .clone()
}

fn id(flag: &str) -> Result<u32, String> {
    let out = Command::new("id").args([flag, USER]).output().map_err(|e| e.to_string())?;
    String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| format!("no user {USER}"))
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{cmd} {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// A copy of `bin` that [`USER`] may run, made once per test process.
pub fn runnable_copy(bin: &std::path::Path) -> PathBuf {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    COPY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("plaudit-part-bin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory for the node binary");
        let copy = dir.join("plaudit-node");
        std::fs::copy(bin, &copy).expect("copying the node binary");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        copy
    })
    .clone()
}

/// Gives `path` (recursively) to [`USER`], so a node running as it can
/// write its data directory and read its secret.
pub fn give(path: &std::path::Path) -> Result<(), String> {
    let (uid, gid) = user()?;
    run("chown", &["-R", &format!("{uid}:{gid}"), &path.display().to_string()])
}

/// The rules isolating one node; removed when dropped.
pub struct KernelCut {
    rules: Vec<(&'static str, Vec<String>)>,
}

impl KernelCut {
    /// Drops every packet between the node whose peer port is `port` (it
    /// must run as [`USER`]) and the peer ports `others`, both ways.
    pub fn isolate(port: u16, others: &[u16]) -> Result<KernelCut, String> {
        let (uid, _) = user()?;
        let uid = uid.to_string();
        let theirs = others.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
        let p = port.to_string();
        let specs: Vec<(&'static str, Vec<&str>)> = vec![
            ("INPUT", vec!["-p", "tcp", "--dport", &p, "-j", "DROP"]),
            (
                "OUTPUT",
                vec![
                    "-m",
                    "owner",
                    "--uid-owner",
                    &uid,
                    "-p",
                    "tcp",
                    "-m",
                    "multiport",
                    "--dports",
                    &theirs,
                    "-j",
                    "DROP",
                ],
            ),
            (
                "OUTPUT",
                vec!["-m", "owner", "--uid-owner", &uid, "-p", "tcp", "--sport", &p, "-j", "DROP"],
            ),
        ];
        let mut cut = KernelCut { rules: Vec::new() };
        for (chain, spec) in specs {
            let mut args = vec!["-A", chain];
            args.extend(&spec);
            run("iptables", &args)?;
            cut.rules.push((chain, spec.iter().map(|s| s.to_string()).collect()));
        }
        Ok(cut)
    }

    /// Removes the rules now (dropping does the same).
    pub fn heal(self) {}
}

impl Drop for KernelCut {
    fn drop(&mut self) {
        for (chain, spec) in self.rules.drain(..) {
            let mut args = vec!["-D", chain];
            args.extend(spec.iter().map(String::as_str));
            if let Err(e) = run("iptables", &args) {
                eprintln!("removing a partition rule: {e}");
            }
        }
    }
}
