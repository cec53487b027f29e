//! Accepted connections: a client that accepts no bytes of an answer is cut off by the kernel.
use actix_web::dev::Extensions;
use actix_web::rt::net::TcpStream;
use std::any::Any;
use std::os::fd::AsRawFd;
use std::time::Duration;

/// The `on_connect` hook of the server: sets `TCP_USER_TIMEOUT` to `stall` on each accepted
/// TCP connection. Sent bytes that stay unacknowledged for that long, or a receive window
/// that stays shut (a client that stopped reading), make the kernel close the connection, and
/// the socket's buffers are freed. An idle keep-alive connection has nothing unacknowledged
/// and is not affected.
pub(super) fn on_connect(stall: Duration) -> impl Fn(&dyn Any, &mut Extensions) + Clone {
    let millis = libc::c_uint::try_from(stall.as_millis()).unwrap_or(libc::c_uint::MAX);
    move |conn: &dyn Any, _: &mut Extensions| {
        let Some(stream) = conn.downcast_ref::<TcpStream>() else {
            return;
        };
        if let Err(e) = set_user_timeout(stream, millis) {
            tracing::warn!(error = %e, "cannot set TCP_USER_TIMEOUT on a connection");
        }
    }
}

fn set_user_timeout(stream: &TcpStream, millis: libc::c_uint) -> std::io::Result<()> {
    // SAFETY: the descriptor is the stream's open socket for the duration of the call, and
    // the option value is a c_uint of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            (&millis as *const libc::c_uint).cast(),
            std::mem::size_of::<libc::c_uint>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
