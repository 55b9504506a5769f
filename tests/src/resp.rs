//! A tiny synchronous RESP2 client, for poking a server from outside the code under test.
//!
//! It opens one connection per command on purpose: it shares nothing with the client being
//! tested, so a test can see the server as it is (`DEL` a lock key, read its `PTTL`, count
//! `INFO commandstats`).

use std::fmt;
use std::io::{self, BufRead, BufReader, ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A reply as the server sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`: the whole line after the `-`, error code included.
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nabc`
    Bulk(Vec<u8>),
    /// `$-1` or `*-1`
    Nil,
    /// `*2\r\n...`
    Array(Vec<Reply>),
}

impl Reply {
    /// True for an error reply.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// The text `redis-cli` would print: statuses and bulk strings as they are (bulk strings decoded
/// lossily as UTF-8), integers in decimal, `(nil)`, `(error) <message>`, `(empty array)`, and the
/// elements of an array one per line.
impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(status) => f.write_str(status),
            Reply::Error(message) => write!(f, "(error) {message}"),
            Reply::Integer(n) => write!(f, "{n}"),
            Reply::Bulk(bytes) => f.write_str(&String::from_utf8_lossy(bytes)),
            Reply::Nil => f.write_str("(nil)"),
            Reply::Array(items) if items.is_empty() => f.write_str("(empty array)"),
            Reply::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str("\n")?;
                    }
                    write!(f, "{item}")?;
                }
                Ok(())
            }
        }
    }
}

/// Encodes a command as a RESP array of bulk strings, ready to write to a socket.
pub fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one reply. Fails with `UnexpectedEof` when the peer closed the connection first.
pub fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(reader)?;
    let (kind, rest) = line
        .split_first()
        .ok_or_else(|| invalid("empty reply line"))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    match kind {
        b'+' => Ok(Reply::Status(text())),
        b'-' => Ok(Reply::Error(text())),
        b':' => Ok(Reply::Integer(parse_int(rest)?)),
        b'$' => {
            let Ok(len) = usize::try_from(parse_int(rest)?) else {
                return Ok(Reply::Nil);
            };
            let mut bytes = vec![0; len + 2];
            reader.read_exact(&mut bytes)?;
            bytes.truncate(len);
            Ok(Reply::Bulk(bytes))
        }
        b'*' => {
            let Ok(len) = usize::try_from(parse_int(rest)?) else {
                return Ok(Reply::Nil);
            };
            (0..len)
                .map(|_| read_reply(reader))
                .collect::<io::Result<_>>()
                .map(Reply::Array)
        }
        other => Err(invalid(&format!(
            "unexpected reply type byte {:?}",
            char::from(*other)
        ))),
    }
}

/// Connects to `addr`, authenticates when `password` is given, sends one command and returns its
/// reply. `timeout` bounds the connect and each read and write.
///
/// A failed `AUTH` returns the `AUTH` error reply (e.g. `WRONGPASS ...`) instead of the
/// command's. I/O failures (refused, timed out, closed) are `Err`.
pub fn command(
    addr: SocketAddr,
    password: Option<&str>,
    args: &[&str],
    timeout: Duration,
) -> io::Result<Reply> {
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    let mut request = Vec::new();
    if let Some(password) = password {
        request.extend(encode(&["AUTH", password]));
    }
    request.extend(encode(args));
    (&stream).write_all(&request)?;

    let mut reader = BufReader::new(stream);
    if password.is_some() {
        let auth = read_reply(&mut reader)?;
        if auth.is_error() {
            return Ok(auth);
        }
    }
    read_reply(&mut reader)
}

/// One line without its `\r\n`.
fn read_line(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if line.is_empty() {
        return Err(io::Error::new(
            ErrorKind::UnexpectedEof,
            "connection closed before a reply",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(invalid("reply line cut short"));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn parse_int(digits: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("bad integer in reply"))
}

fn invalid(message: &str) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, message.to_owned())
}
