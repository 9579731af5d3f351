//! A node's incarnation: a random number made when its data directory is
//! made, recorded in `<data_dir>/incarnation`, the same for the directory's
//! whole life (`plaudit_proto::membership`).
//!
//! Why: a node restarted with its id on an empty directory must be a new
//! member of the cluster, not the old one resumed. Its Raft logs are gone:
//! a leader that took it for the old replica would find the follower's log
//! gone backwards (openraft panics then). The id alone cannot tell; the
//! incarnation does, since an empty directory makes a new one.
//!
//! A directory from before the record (it holds a Raft log already) gets
//! an incarnation now and keeps it: it is the same life, and a cluster that
//! recorded its member with incarnation 0 adopts the number.

use anyhow::Context;
use plaudit_proto::membership::Incarnation;
use std::io::Write;
use std::path::Path;

/// The record's file name, in the data directory.
pub const FILE: &str = "incarnation";

/// The directory's incarnation, made (and made durable) if it has none.
pub fn load_or_make(dir: &Path) -> anyhow::Result<Incarnation> {
    let path = dir.join(FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            return u64::from_str_radix(text.trim(), 16).with_context(|| {
                format!("{} holds {:?}, not an incarnation", path.display(), text.trim())
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    }
    // Never 0: 0 stands for "recorded before incarnations existed".
    let made = rand::random::<u64>().max(1);
    let tmp = dir.join(format!("{FILE}.tmp"));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    writeln!(f, "{made:016x}")?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(made)
}

/// How an incarnation is shown: 16 hex digits.
pub fn show(i: Incarnation) -> String {
    format!("{i:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_keeps_its_incarnation_and_a_new_one_gets_another() {
        let a = tempfile::tempdir().unwrap();
        let first = load_or_make(a.path()).unwrap();
        assert_ne!(first, 0);
        assert_eq!(load_or_make(a.path()).unwrap(), first, "the same life");
        let b = tempfile::tempdir().unwrap();
        assert_ne!(load_or_make(b.path()).unwrap(), first, "an empty directory is a new life");
        std::fs::write(a.path().join(FILE), "not hex").unwrap();
        assert!(load_or_make(a.path()).is_err());
        assert_eq!(show(0xab), "00000000000000ab");
    }
}
