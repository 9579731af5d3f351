//! A minimal pipelined RESP2 client over tokio TCP: a command encoder, an
//! incremental reply parser and a connection that writes a batch of commands
//! in one go and reads their replies back in order.

use anyhow::{anyhow, bail, Context};
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// A null bulk string (`$-1`) or null array (`*-1`).
    Nil,
    Array(Vec<Value>),
}

impl Value {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bulk(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RESP protocol error: {}", self.0)
    }
}

impl std::error::Error for ProtocolError {}

const MAX_DEPTH: usize = 32;
const MAX_BULK: i64 = 512 << 20;

/// Parses one reply from the front of `buf`. `Ok(None)` means the buffer
/// holds only part of a reply; `Ok(Some((value, used)))` consumed `used` bytes.
pub fn parse(buf: &[u8]) -> Result<Option<(Value, usize)>, ProtocolError> {
    parse_at(buf, 0, 0)
}

fn line(buf: &[u8], from: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(from..)?;
    let nl = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..nl], from + nl + 2))
}

fn int_of(b: &[u8]) -> Result<i64, ProtocolError> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| ProtocolError(format!("bad integer {:?}", String::from_utf8_lossy(b))))
}

fn text_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn parse_at(buf: &[u8], at: usize, depth: usize) -> Result<Option<(Value, usize)>, ProtocolError> {
    if depth > MAX_DEPTH {
        return Err(ProtocolError("arrays nested too deeply".into()));
    }
    let Some(&tag) = buf.get(at) else { return Ok(None) };
    let Some((body, next)) = line(buf, at + 1) else {
        // Catch garbage early rather than waiting forever for a CRLF.
        if !b"+-:$*".contains(&tag) {
            return Err(ProtocolError(format!("unknown type byte {tag:#04x}")));
        }
        return Ok(None);
    };
    let v = match tag {
        b'+' => Value::Simple(text_of(body)),
        b'-' => Value::Error(text_of(body)),
        b':' => Value::Int(int_of(body)?),
        b'$' => {
            let len = int_of(body)?;
            if len == -1 {
                return Ok(Some((Value::Nil, next)));
            }
            if !(0..=MAX_BULK).contains(&len) {
                return Err(ProtocolError(format!("bad bulk length {len}")));
            }
            let end = next + len as usize;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err(ProtocolError("bulk string not terminated by CRLF".into()));
            }
            return Ok(Some((Value::Bulk(buf[next..end].to_vec()), end + 2)));
        }
        b'*' => {
            let n = int_of(body)?;
            if n == -1 {
                return Ok(Some((Value::Nil, next)));
            }
            if !(0..=(1 << 24)).contains(&n) {
                return Err(ProtocolError(format!("bad array length {n}")));
            }
            let mut items = Vec::with_capacity((n as usize).min(1024));
            let mut pos = next;
            for _ in 0..n {
                match parse_at(buf, pos, depth + 1)? {
                    Some((v, p)) => {
                        items.push(v);
                        pos = p;
                    }
                    None => return Ok(None),
                }
            }
            return Ok(Some((Value::Array(items), pos)));
        }
        other => return Err(ProtocolError(format!("unknown type byte {other:#04x}"))),
    };
    Ok(Some((v, next)))
}

/// One argument of a command.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    Bytes(&'a [u8]),
    Str(&'a str),
    Int(i64),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(s: &'a str) -> Self {
        Arg::Str(s)
    }
}

impl<'a> From<&'a [u8]> for Arg<'a> {
    fn from(b: &'a [u8]) -> Self {
        Arg::Bytes(b)
    }
}

impl From<i64> for Arg<'_> {
    fn from(i: i64) -> Self {
        Arg::Int(i)
    }
}

impl From<u64> for Arg<'_> {
    fn from(i: u64) -> Self {
        Arg::Int(i as i64)
    }
}

fn push_decimal(out: &mut Vec<u8>, v: i64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let neg = v < 0;
    let mut u = v.unsigned_abs();
    loop {
        i -= 1;
        tmp[i] = b'0' + (u % 10) as u8;
        u /= 10;
        if u == 0 {
            break;
        }
    }
    if neg {
        out.push(b'-');
    }
    out.extend_from_slice(&tmp[i..]);
}

fn push_bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    push_decimal(out, b.len() as i64);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// Appends one command (an array of bulk strings) to `out`.
pub fn encode(out: &mut Vec<u8>, args: &[Arg<'_>]) {
    out.push(b'*');
    push_decimal(out, args.len() as i64);
    out.extend_from_slice(b"\r\n");
    for a in args {
        match *a {
            Arg::Bytes(b) => push_bulk(out, b),
            Arg::Str(s) => push_bulk(out, s.as_bytes()),
            Arg::Int(i) => {
                let mut tmp = Vec::with_capacity(20);
                push_decimal(&mut tmp, i);
                push_bulk(out, &tmp);
            }
        }
    }
}

/// One connection. Queue commands with `queue`, then `flush` them in one
/// write and `read_reply` once per command, in order.
pub struct Conn {
    stream: TcpStream,
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    rpos: usize,
}

impl Conn {
    pub async fn connect(addr: &str) -> anyhow::Result<Conn> {
        let stream =
            TcpStream::connect(addr).await.with_context(|| format!("connecting to {addr}"))?;
        stream.set_nodelay(true)?;
        Ok(Conn::from_stream(stream))
    }

    pub fn from_stream(stream: TcpStream) -> Conn {
        Conn {
            stream,
            wbuf: Vec::with_capacity(16 << 10),
            rbuf: Vec::with_capacity(64 << 10),
            rpos: 0,
        }
    }

    /// Encodes a command into the write buffer.
    pub fn queue(&mut self, args: &[Arg<'_>]) {
        encode(&mut self.wbuf, args);
    }

    /// Writes every queued command in one batch.
    pub async fn flush(&mut self) -> io::Result<()> {
        self.stream.write_all(&self.wbuf).await?;
        self.wbuf.clear();
        Ok(())
    }

    /// Reads the next reply; an `-ERR` reply is returned as `Value::Error`.
    pub async fn read_reply(&mut self) -> anyhow::Result<Value> {
        loop {
            if let Some((v, used)) = parse(&self.rbuf[self.rpos..])? {
                self.rpos += used;
                if self.rpos == self.rbuf.len() {
                    self.rbuf.clear();
                    self.rpos = 0;
                }
                return Ok(v);
            }
            if self.rpos > 0 {
                self.rbuf.drain(..self.rpos);
                self.rpos = 0;
            }
            if self.rbuf.capacity() - self.rbuf.len() < 16 << 10 {
                self.rbuf.reserve(64 << 10);
            }
            let n = self.stream.read_buf(&mut self.rbuf).await?;
            if n == 0 {
                bail!("redis closed the connection");
            }
        }
    }

    /// Sends one command and waits for its reply, turning `-ERR` into an error.
    pub async fn command(&mut self, args: &[Arg<'_>]) -> anyhow::Result<Value> {
        self.queue(args);
        self.flush().await?;
        match self.read_reply().await? {
            Value::Error(e) => Err(anyhow!("redis error: {e}")),
            v => Ok(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(args: &[Arg<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&mut out, args);
        out
    }

    #[test]
    fn encodes_commands() {
        assert_eq!(
            enc(&["HMGET".into(), "k".into(), Arg::Int(-42), Arg::Int(0)]),
            b"*4\r\n$5\r\nHMGET\r\n$1\r\nk\r\n$3\r\n-42\r\n$1\r\n0\r\n".to_vec()
        );
        assert_eq!(enc(&[Arg::Bytes(b"")]), b"*1\r\n$0\r\n\r\n".to_vec());
        assert_eq!(
            enc(&[Arg::Int(i64::MIN)]),
            format!("*1\r\n$20\r\n{}\r\n", i64::MIN).into_bytes()
        );
    }

    #[test]
    fn parses_every_type() {
        let cases: Vec<(&[u8], Value)> = vec![
            (b"+OK\r\n", Value::Simple("OK".into())),
            (b"-ERR bad thing\r\n", Value::Error("ERR bad thing".into())),
            (b":-12\r\n", Value::Int(-12)),
            (b"$3\r\na\r\n\r\n", Value::Bulk(b"a\r\n".to_vec())),
            (b"$0\r\n\r\n", Value::Bulk(vec![])),
            (b"$-1\r\n", Value::Nil),
            (b"*-1\r\n", Value::Nil),
            (b"*0\r\n", Value::Array(vec![])),
        ];
        for (wire, want) in cases {
            assert_eq!(parse(wire).unwrap(), Some((want, wire.len())), "{wire:?}");
        }
    }

    #[test]
    fn parses_nested_arrays_with_errors_inside() {
        let wire = b"*3\r\n:1\r\n*2\r\n$1\r\nx\r\n$-1\r\n*2\r\n-NOSCRIPT no\r\n*0\r\n+tail";
        let (v, used) = parse(wire).unwrap().unwrap();
        assert_eq!(
            v,
            Value::Array(vec![
                Value::Int(1),
                Value::Array(vec![Value::Bulk(b"x".to_vec()), Value::Nil]),
                Value::Array(vec![Value::Error("NOSCRIPT no".into()), Value::Array(vec![])]),
            ])
        );
        assert_eq!(&wire[used..], b"+tail");
    }

    #[test]
    fn every_prefix_of_a_reply_is_incomplete() {
        let wire = b"*2\r\n$5\r\nhello\r\n*2\r\n:7\r\n$-1\r\n";
        for cut in 0..wire.len() {
            assert_eq!(parse(&wire[..cut]).unwrap(), None, "prefix of {cut} bytes");
        }
        assert!(parse(wire).unwrap().is_some());
    }

    #[test]
    fn rejects_malformed_input() {
        for bad in [
            &b"?x\r\n"[..],
            b":12a\r\n",
            b"$-2\r\n",
            b"$2\r\nabcd\r\n",
            b"*-5\r\n",
            b"*1\r\n!\r\n",
            b"x",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 2) + ":1\r\n";
        assert!(parse(deep.as_bytes()).is_err());
    }

    #[test]
    fn as_int_reads_ints_and_numeric_bulks() {
        assert_eq!(Value::Int(5).as_int(), Some(5));
        assert_eq!(Value::Bulk(b"-3".to_vec()).as_int(), Some(-3));
        assert_eq!(Value::Nil.as_int(), None);
    }

    /// A fake server on 127.0.0.1 that dribbles pipelined replies out one
    /// byte at a time: the connection must reassemble them in order.
    #[tokio::test]
    async fn connection_reassembles_partial_reads() {
        use tokio::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let want = enc(&["PING".into()]).repeat(2);
            let mut got = vec![0u8; want.len()];
            s.read_exact(&mut got).await.unwrap();
            assert_eq!(got, want);
            let replies = b"+PONG\r\n*2\r\n$3\r\nabc\r\n-ERR nope\r\n";
            for b in replies {
                s.write_all(&[*b]).await.unwrap();
                s.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut c = Conn::connect(&addr).await.unwrap();
        c.queue(&["PING".into()]);
        c.queue(&["PING".into()]);
        c.flush().await.unwrap();
        assert_eq!(c.read_reply().await.unwrap(), Value::Simple("PONG".into()));
        assert_eq!(
            c.read_reply().await.unwrap(),
            Value::Array(vec![Value::Bulk(b"abc".to_vec()), Value::Error("ERR nope".into())])
        );
        server.await.unwrap();
        assert!(c.read_reply().await.is_err(), "EOF must be an error");
    }
}
