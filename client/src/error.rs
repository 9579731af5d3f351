//! `ClientError`: every way a call can fail, separated so callers can decide
//! what to do. A call has already been retried where that is safe (redirects,
//! elections, dead nodes, brief overloads) before it fails, so each error is
//! final for that call. A `Server` error is the node's answer (match on its
//! stable code); `Timeout` means the outcome is unknown; `Io` and `Closed`
//! mean no node could be reached (the next call dials again); `Protocol`
//! means the node said something this client does not understand.

use plaudit_proto::{ErrorCode, WireError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The node answered with an error; `WireError::code` is stable.
    #[error("{0}")]
    Server(WireError),
    /// No reply within the call's timeout. The request may or may not have
    /// been applied.
    #[error("request timed out")]
    Timeout,
    /// Dialling or talking to the node failed at the socket level.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The connection closed before the reply arrived.
    #[error("connection closed before the reply arrived")]
    Closed,
    /// The node sent something this client cannot interpret (an undecodable
    /// frame, or a reply of the wrong kind), or a request could not be encoded.
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl ClientError {
    /// The stable wire code, for errors that have one: the node's code for
    /// `Server`, `Timeout` for a client-side timeout, `None` otherwise.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server(e) => Some(e.code),
            ClientError::Timeout => Some(ErrorCode::Timeout),
            ClientError::Io(_) | ClientError::Closed | ClientError::Protocol(_) => None,
        }
    }

    /// Whether the connection failed (as opposed to the request): `Io` or
    /// `Closed`. The next call on the client dials afresh.
    pub fn is_connection(&self) -> bool {
        matches!(self, ClientError::Io(_) | ClientError::Closed)
    }
}

impl ClientError {
    /// The same error again, for each of several calls it fails
    /// (`io::Error` is not `Clone`: its kind and message are kept).
    pub(crate) fn duplicate(&self) -> ClientError {
        match self {
            ClientError::Server(e) => ClientError::Server(e.clone()),
            ClientError::Timeout => ClientError::Timeout,
            ClientError::Io(e) => ClientError::Io(std::io::Error::new(e.kind(), e.to_string())),
            ClientError::Closed => ClientError::Closed,
            ClientError::Protocol(m) => ClientError::Protocol(m.clone()),
        }
    }
}

impl From<WireError> for ClientError {
    fn from(e: WireError) -> Self {
        ClientError::Server(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_come_from_the_server_or_the_timeout() {
        let nf = ClientError::Server(WireError::not_found("no business 9"));
        assert_eq!(nf.code(), Some(ErrorCode::NotFound));
        assert_eq!(ClientError::Timeout.code(), Some(ErrorCode::Timeout));
        assert_eq!(ClientError::Closed.code(), None);
        assert_eq!(ClientError::Protocol("x".into()).code(), None);
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(ClientError::Io(io).code(), None);
    }

    #[test]
    fn server_errors_display_code_and_message() {
        let e = ClientError::Server(WireError::not_found("no business 9"));
        assert_eq!(e.to_string(), "NotFound: no business 9");
    }
}
