//! Why a connection ended.

/// Why a connection ended: the label of `plaudit_connections_closed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// The client closed it (or it ended after the node began to stop).
    Client,
    Idle,
    AuthTimeout,
    /// Failed `Auth` [`MAX_FAILED_AUTHS`] times.
    AuthFailed,
    FrameTimeout,
    WriteTimeout,
    /// Closed to make room for a newer connection at the cap.
    Evicted,
    /// A frame with an impossible length: the stream cannot be followed.
    BadFrame,
    /// The socket failed.
    Error,
}

impl Close {
    pub fn label(self) -> &'static str {
        match self {
            Close::Client => "client",
            Close::Idle => "idle",
            Close::AuthTimeout => "auth_timeout",
            Close::AuthFailed => "auth_failed",
            Close::FrameTimeout => "frame_timeout",
            Close::WriteTimeout => "write_timeout",
            Close::Evicted => "evicted",
            Close::BadFrame => "bad_frame",
            Close::Error => "error",
        }
    }
}
