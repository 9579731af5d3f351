//! Hand-built frames over a raw socket, for tests that must send what the
//! SDK never would (and to ask one node without the SDK's routing).
use plaudit_client::proto::frame::{self, PROTOCOL_VERSION};
use plaudit_client::proto::{Envelope, Request, Response};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a raw read may wait for the node.
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// `[u32 BE len][payload]`.
pub fn frame_of(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(payload);
    out
}

/// A well-formed request frame.
pub fn request_frame(req_id: u64, body: Request) -> Vec<u8> {
    let mut out = Vec::new();
    frame::encode_frame(&Envelope { req_id, body }, &mut out).expect("encode");
    out
}

/// A frame with the right version and a body that is not a valid envelope
/// (variant tag 0xEE does not exist), but whose `req_id` can be recovered.
pub fn garbage_frame(req_id: u64) -> Vec<u8> {
    let mut payload = vec![PROTOCOL_VERSION];
    payload.extend(plaudit_client::proto::codec::to_bytes(&req_id).expect("encode"));
    payload.extend_from_slice(&[0xEE, 0xFF, 0x13, 0x37]);
    frame_of(&payload)
}

pub struct RawConn {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl RawConn {
    pub async fn connect(addr: &str) -> RawConn {
        let stream = TcpStream::connect(addr).await.expect("raw connect");
        stream.set_nodelay(true).expect("nodelay");
        RawConn { stream, buf: Vec::new() }
    }

    /// Connects from the loopback address `from` (any 127.x works), as a
    /// client on another host would: the node counts connections per
    /// source address.
    pub async fn connect_from(addr: &str, from: std::net::IpAddr) -> std::io::Result<RawConn> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(std::net::SocketAddr::new(from, 0))?;
        let stream = socket.connect(addr.parse().expect("an ip:port")).await?;
        stream.set_nodelay(true)?;
        Ok(RawConn { stream, buf: Vec::new() })
    }

    /// Sends `req` and waits for its reply (`None`: closed, or no reply).
    pub async fn ask(&mut self, req_id: u64, req: Request) -> Option<Response> {
        let f = request_frame(req_id, req);
        self.stream.write_all(&f).await.ok()?;
        match tokio::time::timeout(READ_TIMEOUT, self.try_recv()).await {
            Ok(Ok(env)) => Some(env.body),
            _ => None,
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("raw write");
    }

    pub async fn send_request(&mut self, req_id: u64, body: Request) {
        let f = request_frame(req_id, body);
        self.send(&f).await;
    }

    /// Reads one reply frame; panics on timeout, close or a bad frame.
    pub async fn recv(&mut self) -> Envelope<Response> {
        match tokio::time::timeout(READ_TIMEOUT, self.try_recv()).await {
            Ok(Ok(env)) => env,
            Ok(Err(e)) => panic!("reading a reply: {e}"),
            Err(_) => panic!("no reply within {READ_TIMEOUT:?}"),
        }
    }

    pub async fn try_recv(&mut self) -> Result<Envelope<Response>, frame::FrameError> {
        frame::read_frame(&mut self.stream, &mut self.buf).await
    }

    /// Whether the node closes the connection (EOF or reset) within the
    /// read timeout, with nothing more to read.
    pub async fn closed_by_peer(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(READ_TIMEOUT, self.stream.read(&mut byte)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(_)) | Err(_) => false,
        }
    }
}

/// Sends a like for each of `users` (entity 1 of `biz`) to the node at
/// `addr` on one raw connection (no SDK to route around it) and checks
/// that every one is answered with an error: a node cut off from its
/// majority acknowledges no write.
pub async fn likes_refused(addr: &str, biz: plaudit_client::proto::BizId, users: &[u64]) {
    use plaudit_client::proto::likes::LikeRequest;
    use plaudit_client::proto::{LikeAction, Request, Response};
    let mut lone = RawConn::connect(addr).await;
    for (i, &user) in users.iter().enumerate() {
        let like = LikeRequest { biz, entity: 1, user, owner: None, action: LikeAction::Like };
        lone.send_request(i as u64 + 1, Request::Like(like)).await;
    }
    for _ in users {
        let reply = lone.recv().await;
        assert!(matches!(reply.body, Response::Error(_)), "a cut-off node acknowledged {reply:?}");
    }
}
