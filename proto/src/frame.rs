//! Length-prefixed frames over any async byte stream.
//!
//! A frame is `[u32 BE len][payload]` with `payload = [version][bincode]`.
//! The length is checked before any allocation, so an oversized or hostile
//! length costs nothing. A payload that fails to decode still has known
//! bounds, so the stream stays in sync and the connection can keep serving;
//! only a bad length forces the connection closed.

use crate::codec::{self, CodecError};
use crate::limits::MAX_FRAME_LEN;
use crate::message::{Envelope, Request, Response};
use crate::{client_codec, fast_decode, fast_encode};
use serde::{de::DeserializeOwned, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version this build speaks. Bumped on incompatible changes.
pub const PROTOCOL_VERSION: u8 = 1;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the stream cleanly between frames.
    #[error("connection closed")]
    Closed,
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The length prefix is zero or over the limit; the stream is out of sync.
    #[error("frame length {0} is outside 1..={MAX_FRAME_LEN}")]
    BadLength(usize),
    /// The payload was read whole but is not a valid envelope; the stream is in sync.
    #[error("malformed frame (req_id {req_id:?}): {reason}")]
    Malformed { req_id: Option<u64>, reason: String },
}

impl FrameError {
    /// Whether the stream can still be read after this error.
    pub fn in_sync(&self) -> bool {
        matches!(self, FrameError::Malformed { .. })
    }
}

/// Reads one raw payload. `buf` is reused across calls to avoid allocation.
pub async fn read_payload<R: AsyncRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> Result<(), FrameError> {
    let mut len = [0u8; 4];
    match reader.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len == 0 || len > MAX_FRAME_LEN {
        return Err(FrameError::BadLength(len));
    }
    buf.clear();
    buf.resize(len, 0);
    reader.read_exact(buf).await?;
    Ok(())
}

/// Decodes a payload read by `read_payload`.
pub fn decode_payload<T: DeserializeOwned>(payload: &[u8]) -> Result<Envelope<T>, FrameError> {
    let (version, body) = payload.split_first().ok_or(FrameError::BadLength(0))?;
    if *version != PROTOCOL_VERSION {
        return Err(FrameError::Malformed {
            req_id: peek_req_id(body),
            reason: format!(
                "unsupported protocol version {version}, this node speaks {PROTOCOL_VERSION}"
            ),
        });
    }
    codec::from_bytes_within::<MAX_FRAME_LEN, _>(body)
        .map_err(|e| FrameError::Malformed { req_id: peek_req_id(body), reason: e.to_string() })
}

/// Decodes a request payload: `decode_payload`, with the busiest requests
/// (scoring events, board queries, likes, status and counts) read by hand
/// (`fast_decode.rs`; same result, a fraction of the cost).
pub fn decode_request(payload: &[u8]) -> Result<Envelope<Request>, FrameError> {
    if let [PROTOCOL_VERSION, body @ ..] = payload {
        if let Some(env) = fast_decode::request_envelope(body) {
            return Ok(env);
        }
    }
    decode_payload(payload)
}

/// Decodes a reply payload: `decode_payload`, with the replies to the
/// busiest requests read by hand (`client_codec.rs`; same result).
pub fn decode_reply(payload: &[u8]) -> Result<Envelope<Response>, FrameError> {
    if let [PROTOCOL_VERSION, body @ ..] = payload {
        if let Some(env) = client_codec::reply_envelope(body) {
            return Ok(env);
        }
    }
    decode_payload(payload)
}

/// The request id is the envelope's first field, so it can be recovered from a
/// payload whose body is broken, letting the error reply reach the right caller.
fn peek_req_id(body: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Head {
        req_id: u64,
    }
    bincode::serde::decode_from_slice::<Head, _>(body, bincode::config::standard())
        .ok()
        .map(|(h, _)| h.req_id)
}

/// Reads and decodes one frame.
pub async fn read_frame<R: AsyncRead + Unpin, T: DeserializeOwned>(
    reader: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Envelope<T>, FrameError> {
    read_payload(reader, buf).await?;
    decode_payload(buf)
}

/// Encodes one frame (prefix, version, envelope) onto the end of `out`, so
/// many frames can be written with one syscall.
pub fn encode_frame<T: Serialize>(env: &Envelope<T>, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let start = begin_frame(out);
    if let Err(e) = codec::encode_into(env, out) {
        out.truncate(start);
        return Err(e);
    }
    end_frame(out, start)
}

/// Encodes one request frame onto the end of `out`: `encode_frame`, with
/// the busiest requests written by hand (`client_codec.rs`; the same
/// bytes, and the same error past the frame limit).
pub fn encode_request(req_id: u64, req: &Request, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let start = begin_frame(out);
    if client_codec::encode_request_body(req_id, req, out) {
        return end_frame(out, start);
    }
    out.truncate(start);
    encode_frame(&Envelope { req_id, body: req }, out)
}

/// Encodes one reply frame onto the end of `out`: `encode_frame`, with
/// the states and counts of a batch and board query replies written by
/// hand (`fast_encode.rs`; the same bytes, and the same error past the
/// frame limit).
pub fn encode_reply(env: &Envelope<Response>, out: &mut Vec<u8>) -> Result<(), CodecError> {
    match &env.body {
        Response::Counts(c) => fast_encode::encode_counts_reply(env.req_id, c, out),
        Response::Status(s) => fast_encode::encode_status_reply(env.req_id, s, out),
        Response::Query(q) => fast_encode::encode_query_reply(env.req_id, q, out),
        _ => encode_frame(env, out),
    }
}

/// Starts a frame at the end of `out` (a length to fill in, the version);
/// returns where it starts.
pub(crate) fn begin_frame(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, PROTOCOL_VERSION]);
    start
}

/// Fills in the length of the frame begun at `start`, or takes the frame
/// back out if it is over the limit.
pub(crate) fn end_frame(out: &mut Vec<u8>, start: usize) -> Result<(), CodecError> {
    let len = out.len() - start - 4;
    if len > MAX_FRAME_LEN {
        out.truncate(start);
        return Err(CodecError::Encode(format!("frame of {len} bytes exceeds {MAX_FRAME_LEN}")));
    }
    out[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// Encodes and writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    writer: &mut W,
    env: &Envelope<T>,
) -> Result<(), FrameError> {
    let mut out = Vec::new();
    encode_frame(env, &mut out)
        .map_err(|e| FrameError::Io(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    writer.write_all(&out).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pipeline bit survives the hand-written decoders of the busiest
    /// requests and the serde path alike, and only a marked id carries it.
    #[test]
    fn a_pipelined_id_comes_through_every_decoder() {
        use crate::likes::CountsRequest;
        use crate::message::PIPELINED;
        let reqs = [Request::Counts(CountsRequest { biz: 1, entities: vec![3, 4] }), Request::Ping];
        for req in reqs {
            for id in [7, PIPELINED | 7, PIPELINED | u32::MAX as u64] {
                let mut out = Vec::new();
                encode_request(id, &req, &mut out).unwrap();
                let env = decode_request(&out[4..]).unwrap();
                assert_eq!((env.req_id, &env.body), (id, &req));
                assert_eq!(env.pipelined(), id & PIPELINED != 0);
            }
        }
    }

    /// A payload of a few bytes whose board name announces a terabyte:
    /// a query (`fast_decode` leaves it to serde, which would allocate
    /// what it announces) or, as a reply, a top-N list.
    fn announcing_a_terabyte(variant: u8) -> Vec<u8> {
        let mut payload = vec![PROTOCOL_VERSION, 7, variant, 1, 0, 253];
        payload.extend_from_slice(&(1u64 << 40).to_le_bytes());
        payload.extend_from_slice(b"abc");
        payload
    }

    #[test]
    fn a_string_announcing_more_than_a_frame_is_refused_not_allocated() {
        // Without the bound the process aborts here ("memory allocation of
        // 1099511627776 bytes failed"), so the test cannot pass by luck.
        match decode_request(&announcing_a_terabyte(16)) {
            Err(FrameError::Malformed { req_id: Some(7), .. }) => {}
            other => panic!("expected a malformed request, got {other:?}"),
        }
        // Response::Query (12), QueryReply::Items (0) with its type id.
        let mut reply = announcing_a_terabyte(12);
        reply.remove(3); // no rank in a reply
        assert!(matches!(decode_reply(&reply), Err(FrameError::Malformed { req_id: Some(7), .. })));
        // A string as long as a frame allows still decodes.
        let name = "x".repeat(MAX_FRAME_LEN - 64);
        let req = Request::GetRank(1);
        let big = Request::CreateBiz(crate::business::CreateBiz {
            id: None,
            name,
            config: Default::default(),
        });
        for body in [req, big] {
            let mut out = Vec::new();
            encode_frame(&Envelope { req_id: 3, body: body.clone() }, &mut out).unwrap();
            assert_eq!(decode_request(&out[4..]).unwrap(), Envelope { req_id: 3, body });
        }
    }

    #[tokio::test]
    async fn frames_round_trip_back_to_back() {
        let mut out = Vec::new();
        for id in 0..3 {
            encode_frame(&Envelope { req_id: id, body: Request::Ping }, &mut out).unwrap();
        }
        let mut rd = &out[..];
        let mut buf = Vec::new();
        for id in 0..3 {
            let env: Envelope<Request> = read_frame(&mut rd, &mut buf).await.unwrap();
            assert_eq!(env.req_id, id);
        }
        assert!(matches!(
            read_frame::<_, Request>(&mut rd, &mut buf).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn oversized_length_is_rejected_before_reading() {
        let bytes = ((MAX_FRAME_LEN + 1) as u32).to_be_bytes();
        let mut rd = &bytes[..];
        let err = read_frame::<_, Request>(&mut rd, &mut Vec::new()).await.unwrap_err();
        assert!(matches!(err, FrameError::BadLength(_)));
        assert!(!err.in_sync());
    }

    #[tokio::test]
    async fn garbage_body_keeps_the_request_id() {
        let mut out = Vec::new();
        encode_frame(&Envelope { req_id: 42, body: Request::Ping }, &mut out).unwrap();
        // Replace the body's variant tag with one that does not exist.
        let last = out.len() - 1;
        out[last] = 0xEE;
        let mut rd = &out[..];
        match read_frame::<_, Request>(&mut rd, &mut Vec::new()).await {
            Err(FrameError::Malformed { req_id, .. }) => assert_eq!(req_id, Some(42)),
            other => panic!("expected Malformed, got {other:?}"),
        }
    }
}
