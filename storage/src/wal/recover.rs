//! The log's record format, and reading the segments back when the log is
//! opened: every whole record whose checksum holds is applied to the index,
//! in order; a torn or damaged tail is cut.

use super::*;

impl WalInner {
    /// Reads every segment in order, keeps the intact prefix, cuts the rest.
    pub(super) fn recover(&mut self) -> io::Result<()> {
        let mut names: Vec<(u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let path = e?.path();
            let seq = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("wal-")?.strip_suffix(".log")?.parse().ok());
            if let Some(seq) = seq {
                names.push((seq, path));
            }
        }
        names.sort();
        for (seq, path) in names {
            let file = OpenOptions::new().read(true).write(true).open(&path)?;
            let bytes = std::fs::read(&path)?;
            self.segments.push(Segment {
                seq,
                path: path.clone(),
                file: Arc::new(file),
                len: 0,
                base: 0,
                live: 0,
                live_bytes: 0,
                grows: true,
            });
            let mut off = 0usize;
            while let Some((group, kind, index, payload)) = parse(&bytes[off..]) {
                let loc = Loc { seg: seq, off: (off + HEADER) as u64, len: payload.len() as u32 };
                self.apply(group, kind, index, payload, loc);
                off += HEADER + payload.len();
            }
            let seg = self.segments.last_mut().ok_or_else(|| io::Error::other("no segment"))?;
            seg.len = off as u64;
            seg.grows = off == bytes.len();
            // Zeros after the last record are room made for appends (see
            // the module doc): kept. Anything else is torn or damaged.
            if off < bytes.len() && bytes[off..].iter().any(|&b| b != 0) {
                // Only the newest segment can end torn (a segment is synced
                // before the next one starts); anywhere else this is damage,
                // and the later segments are still the best record there is.
                tracing::warn!(segment = %path.display(), at = off, "cutting a torn or corrupt log tail");
                seg.file.set_len(off as u64)?;
                seg.file.sync_all()?;
                seg.grows = true;
            }
        }
        Ok(())
    }
}

pub(super) fn encode(group: u32, r: &Record<'_>, out: &mut Vec<u8>) -> io::Result<()> {
    if r.payload.len() > MAX_RECORD {
        return Err(io::Error::other(format!("log record of {} bytes", r.payload.len())));
    }
    let start = out.len();
    out.extend_from_slice(&(r.payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&group.to_le_bytes());
    out.push(r.kind);
    out.extend_from_slice(&r.index.to_le_bytes());
    out.extend_from_slice(r.payload);
    let sum = crc32fast::hash(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&sum.to_le_bytes());
    Ok(())
}

/// `(group, kind, index, payload)` of the record at the start of `b`, if it
/// is whole and its checksum holds.
fn parse(b: &[u8]) -> Option<(u32, u8, u64, &[u8])> {
    let header = b.get(..HEADER)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let sum = u32::from_le_bytes(header[4..8].try_into().ok()?);
    if len > MAX_RECORD {
        return None;
    }
    let body = b.get(8..HEADER + len)?;
    if crc32fast::hash(body) != sum {
        return None;
    }
    let group = u32::from_le_bytes(header[8..12].try_into().ok()?);
    let kind = header[12];
    let index = u64::from_le_bytes(header[13..21].try_into().ok()?);
    Some((group, kind, index, &b[HEADER..HEADER + len]))
}
