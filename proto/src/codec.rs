//! The one place bincode is called. Wire frames, Raft entries and stored
//! values all use this configuration (standard: little-endian varints), so a
//! value that round-trips here round-trips everywhere.

use serde::{de::DeserializeOwned, Serialize};

/// A value failed to encode or decode.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("encode: {0}")]
    Encode(String),
    #[error("decode: {0}")]
    Decode(String),
    #[error("decode: {0} trailing bytes")]
    Trailing(usize),
}

fn config() -> bincode::config::Configuration {
    bincode::config::standard()
}

/// Encodes any serde value.
pub fn to_bytes<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    bincode::serde::encode_to_vec(value, config()).map_err(|e| CodecError::Encode(e.to_string()))
}

/// Appends the encoding of `value` to `out`.
pub fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    // Straight into `out`: no buffer of its own to allocate and copy (a
    // reply's frame is written this way). On failure `out` may hold part
    // of the value; the caller truncates.
    bincode::serde::encode_into_std_write(value, out, config())
        .map(|_| ())
        .map_err(|e| CodecError::Encode(e.to_string()))
}

/// Decodes a value that must span all of `bytes`: trailing garbage is an
/// error, so a truncated or padded frame never decodes as something else.
pub fn from_bytes<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    decode_whole(bytes, config())
}

/// Decodes bytes read off a socket, as [`from_bytes`] does, with the
/// bytes its strings (and byte buffers) may claim bounded by `MAX`, the
/// largest message the socket's protocol takes.
///
/// Why: bincode 2 allocates a string's announced length before it reads a
/// byte of it (`vec![0u8; len]`), so a message of a few bytes that
/// announced a string of a terabyte aborted the process when the allocation
/// failed, from a connection that had not authenticated. Strings and byte
/// buffers are all that claims under serde, and a message's cannot hold
/// more bytes than the message, so the bound refuses nothing that fits.
/// Stored values and Raft entries, written by the node itself, keep
/// [`from_bytes`].
pub fn from_bytes_within<const MAX: usize, T: DeserializeOwned>(
    bytes: &[u8],
) -> Result<T, CodecError> {
    decode_whole(bytes, config().with_limit::<MAX>())
}

fn decode_whole<T: DeserializeOwned>(
    bytes: &[u8],
    config: impl bincode::config::Config,
) -> Result<T, CodecError> {
    let (value, used) = bincode::serde::decode_from_slice(bytes, config)
        .map_err(|e| CodecError::Decode(e.to_string()))?;
    if used != bytes.len() {
        return Err(CodecError::Trailing(bytes.len() - used));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::likes::{LikeAction, LikeRequest};
    use crate::message::{Envelope, Request};

    #[test]
    fn request_round_trips() {
        let req = Envelope {
            req_id: 7,
            body: Request::Like(LikeRequest {
                biz: 1,
                entity: 2,
                user: 3,
                owner: Some(4),
                action: LikeAction::Dislike,
            }),
        };
        let bytes = to_bytes(&req).unwrap();
        let back: Envelope<Request> = from_bytes(&bytes).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn trailing_bytes_are_rejected() {
        let mut bytes = to_bytes(&Envelope { req_id: 1, body: Request::Ping }).unwrap();
        bytes.push(0);
        assert!(matches!(from_bytes::<Envelope<Request>>(&bytes), Err(CodecError::Trailing(1))));
    }
}
