//! Bincode's standard encoding of integers, strings and sequences, read
//! and written by hand: what the hand-written codecs (`fast_decode`,
//! `fast_encode`, `client_codec`) share. Little-endian varints (a byte
//! below 251 is the value; 251, 252 and 253 announce a `u16`, `u32` or
//! `u64`), zigzag for signed integers, one tag byte (0 or 1) for an
//! `Option`, a varint length before a string or a sequence. The serde
//! encoding stays the definition; each codec's tests check it against serde.

use crate::limits::MAX_BATCH;
use crate::rankings::MAX_DIMS;

/// Bincode's standard varint: below 251 one byte, else a tag (251, 252,
/// 253) and the value as a little-endian `u16`, `u32` or `u64`.
pub(crate) fn varint(out: &mut Vec<u8>, v: u64) {
    if v < 251 {
        out.push(v as u8);
    } else if let Ok(v) = u16::try_from(v) {
        out.push(251);
        out.extend_from_slice(&v.to_le_bytes());
    } else if let Ok(v) = u32::try_from(v) {
        out.push(252);
        out.extend_from_slice(&v.to_le_bytes());
    } else {
        out.push(253);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Bincode's signed varint: zigzag (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...),
/// then the unsigned varint.
pub(crate) fn signed(out: &mut Vec<u8>, s: i64) {
    varint(out, ((s << 1) ^ (s >> 63)) as u64);
}

/// An `Option`: a tag byte (0 for `None`, 1 for `Some`), then the value.
pub(crate) fn option<T>(out: &mut Vec<u8>, v: Option<T>, write: impl Fn(&mut Vec<u8>, T)) {
    match v {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            write(out, v);
        }
    }
}

/// A string: its length in bytes, then its UTF-8 bytes.
pub(crate) fn string(out: &mut Vec<u8>, s: &str) {
    varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// The bytes not read yet.
pub(crate) struct Cursor<'a>(pub(crate) &'a [u8]);

impl Cursor<'_> {
    pub(crate) fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        match self.byte()? {
            b @ 0..=250 => Some(u64::from(b)),
            251 => Some(u64::from(u16::from_le_bytes(self.array()?))),
            252 => Some(u64::from(u32::from_le_bytes(self.array()?))),
            253 => Some(u64::from_le_bytes(self.array()?)),
            _ => None,
        }
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        match self.byte()? {
            b @ 0..=250 => Some(u32::from(b)),
            251 => Some(u32::from(u16::from_le_bytes(self.array()?))),
            252 => Some(u32::from_le_bytes(self.array()?)),
            _ => None,
        }
    }

    /// Zigzag: even `n` is `n / 2`, odd `n` is `!(n / 2)`.
    pub(crate) fn i64(&mut self) -> Option<i64> {
        let n = self.u64()?;
        let half = (n / 2) as i64;
        Some(if n % 2 == 0 { half } else { !half })
    }

    pub(crate) fn option_u64(&mut self) -> Option<Option<u64>> {
        match self.byte()? {
            0 => Some(None),
            1 => Some(Some(self.u64()?)),
            _ => None,
        }
    }

    /// A batch of ids. Longer batches than a request may carry are
    /// refused later; serde decodes them for that.
    pub(crate) fn ids(&mut self) -> Option<Vec<u64>> {
        let n = self.u64()?;
        if n > MAX_BATCH as u64 {
            return None;
        }
        (0..n).map(|_| self.u64()).collect()
    }

    /// Dimension values by name. More than a ranking may have are refused
    /// later; serde decodes them for that, and no length read here sizes
    /// an allocation.
    pub(crate) fn dims(&mut self) -> Option<Vec<(String, u64)>> {
        let n = self.u64()?;
        if n > MAX_DIMS as u64 {
            return None;
        }
        let mut dims = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let name = self.string()?;
            dims.push((name, self.u64()?));
        }
        Some(dims)
    }

    pub(crate) fn string(&mut self) -> Option<String> {
        let len = usize::try_from(self.u64()?).ok()?;
        let bytes = self.bytes(len)?;
        std::str::from_utf8(bytes).ok().map(str::to_owned)
    }
}

/// Inputs for the hand-written decoders' property tests, which check that
/// a decoder never answers differently from serde.
#[cfg(test)]
pub(crate) mod fuzz {
    use proptest::sample::Index;

    /// `bytes` broken one way (`how`): cut at a place, a byte there
    /// changed, or `byte` added there.
    pub(crate) fn broken(mut bytes: Vec<u8>, at: Index, byte: u8, how: u8) -> Vec<u8> {
        let i = at.index(bytes.len());
        match how {
            0 => bytes.truncate(i),
            1 => bytes[i] = byte,
            _ => bytes.insert(i, byte),
        }
        bytes
    }

    /// Mostly arbitrary bytes after an envelope's first two (req_id 1, a
    /// known variant), so that the decoder reaches the fields; and the
    /// arbitrary bytes alone.
    pub(crate) fn led_by(variant: u8, bytes: &[u8]) -> [Vec<u8>; 2] {
        let mut led = vec![1, variant];
        led.extend_from_slice(bytes);
        [led, bytes.to_vec()]
    }
}
