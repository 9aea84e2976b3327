//! Serving READ and WRITE requests of disk segments on a connection.
//!
//! Bytes move in chunks of [`DISK_IO_CHUNK_BYTES`] through the segment's
//! aligned buffers: a READ reads (and verifies) a chunk into a buffer and
//! writes that buffer's slice to the socket, while the next chunk is already
//! being read; a WRITE reads the socket straight into a buffer and hands it
//! to the segment, while the next chunk arrives. Each connection holds at
//! most two of a segment's buffers, and the one being sent or written is
//! always given back without waiting for another, so connections competing
//! for the pool never deadlock.
//!
//! Statuses: the first chunk of a READ (256 KiB: reads are cut finer than
//! writes so the disk read of the next chunk overlaps the send of this one)
//! is read and verified before the OK header goes out, so a request whose
//! first chunk fails verification is answered CORRUPT on a connection that
//! stays open. A later chunk failing after the OK header can only be
//! signalled by closing the connection mid-payload (logged; the client
//! reads another replica). Either way the corrupt range is noted for the
//! store node to report. A WRITE must start on a block boundary and its
//! block-padded end must stay inside its capability (the padding writes
//! zeros up to the block's end); otherwise OUT_OF_RANGE before any byte is
//! read. Disk errors other than CORRUPT answer INTERNAL.

use std::io;
use std::sync::atomic::Ordering;

use mooncake_segment::{DISK_IO_CHUNK_BYTES, DiskBuf, DiskError, DiskSegment};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::connection::{After, Connection, with_timeout};
use crate::frame::{RequestHeader, ResponseHeader, Status, encode_response};

/// Length of chunk `done..` of a transfer of `total` bytes.
fn chunk_len(total: u64, done: u64) -> usize {
    (total - done).min(DISK_IO_CHUNK_BYTES as u64) as usize
}

/// Chunks of a READ: small enough that the disk read of the next overlaps
/// the send of this one within one lane's request (the TCP client asks for
/// 1 MiB per lane; read whole, a lane would send nothing until its whole
/// read was done: `mooncake bench disk` measured 0.5x a raw read that way).
const READ_CHUNK_BYTES: u64 = 256 << 10;

/// Length of READ chunk `done..` of `total` bytes.
fn read_chunk_len(total: u64, done: u64) -> usize {
    (total - done).min(READ_CHUNK_BYTES) as usize
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    pub(super) async fn serve_disk_read(&mut self, request: &RequestHeader, disk: &DiskSegment) -> io::Result<After> {
        let payload = self.deadlines.payload;
        let total = request.length;
        let first_len = read_chunk_len(total, 0);
        let mut current = match disk_step(payload, disk, disk.read(request.offset, first_len)).await {
            Ok(buf) => buf,
            Err(err) => return self.disk_failed(request, disk, err).await,
        };
        let header =
            encode_response(&ResponseHeader { status: Status::Ok, request_id: request.request_id, length: total });
        with_timeout(payload, self.stream.write_all(&header)).await?;
        let mut done = first_len as u64;
        loop {
            let stream = &mut self.stream;
            let send = async move {
                with_timeout(payload, stream.write_all(current.as_slice())).await
                // `current` drops here, back to the pool before the next read needs one.
            };
            if done == total {
                send.await?;
                break;
            }
            let next_len = read_chunk_len(total, done);
            let (sent, next) = tokio::join!(send, disk_step(payload, disk, disk.read(request.offset + done, next_len)));
            sent?;
            if let Err(DiskError::Corrupt { offset, len }) = &next {
                self.registry.note_corrupt(request.segment_id, *offset, *len);
            }
            current = next.map_err(|err| {
                // The OK header is out: the only way to refuse now is to cut the payload.
                tracing::warn!(peer = %self.peer, segment = %request.segment_id, offset = request.offset + done,
                    "disk segment READ failed after its OK header, closing the connection: {err}");
                io::Error::other(err)
            })?;
            done += next_len as u64;
        }
        self.counters.read_bytes.fetch_add(total, Ordering::Relaxed);
        Ok(After::KeepOpen)
    }

    pub(super) async fn serve_disk_write(&mut self, request: &RequestHeader, disk: &DiskSegment) -> io::Result<After> {
        let payload = self.deadlines.payload;
        // Answers held back for pipelined READs leave before the payload is
        // awaited: a client may wait for them before it sends the payload.
        with_timeout(payload, self.stream.flush()).await?;
        let total = request.length;
        let mut filled: Option<(u64, DiskBuf)> = None;
        let mut received = 0;
        loop {
            // Store the chunk received last while the next one arrives.
            let store = async {
                match filled.take() {
                    Some((offset, buf)) => disk_step(payload, disk, disk.write(offset, buf)).await,
                    None => Ok(()),
                }
            };
            let stream = &mut self.stream;
            let receive = async {
                if received == total {
                    return Ok(None);
                }
                let len = chunk_len(total, received);
                let mut buf = disk_step(payload, disk, disk.buffer(len)).await.map_err(io::Error::other)?;
                with_timeout(payload, stream.read_exact(buf.as_mut_slice())).await?;
                Ok::<_, io::Error>(Some((request.offset + received, buf)))
            };
            let (stored, next) = tokio::join!(store, receive);
            if let Err(err) = stored {
                return self.disk_failed(request, disk, err).await;
            }
            match next? {
                Some((offset, buf)) => {
                    received += buf.len() as u64;
                    filled = Some((offset, buf));
                }
                None => break,
            }
        }
        self.counters.written_bytes.fetch_add(total, Ordering::Relaxed);
        self.send_header(Status::Ok, request.request_id, total).await?;
        Ok(After::KeepOpen)
    }

    /// Answers a disk error with its status (a WRITE's connection then
    /// closes, as for any refused WRITE) and logs it: corruption and disk
    /// failures are the operator's business, unlike a client's bad request.
    async fn disk_failed(&mut self, request: &RequestHeader, disk: &DiskSegment, err: DiskError) -> io::Result<After> {
        let status = crate::access::disk_status(&err);
        if let DiskError::Corrupt { offset, len } = &err {
            self.registry.note_corrupt(request.segment_id, *offset, *len);
        }
        match status {
            Status::Corrupt => tracing::warn!(peer = %self.peer, segment = %request.segment_id,
                path = %disk.path().display(), "disk segment {:?} answered CORRUPT: {err}", request.op),
            _ => tracing::error!(peer = %self.peer, segment = %request.segment_id,
                path = %disk.path().display(), "disk segment {:?} failed: {err}", request.op),
        }
        self.refuse(request, status).await
    }
}

/// One disk operation under the payload deadline: a disk that stalls
/// longer fails the request like a stalled peer would. (The operation's
/// buffers stay with the segment's I/O thread until the kernel is done.)
async fn disk_step<T>(
    limit: std::time::Duration,
    disk: &DiskSegment,
    op: impl Future<Output = Result<T, DiskError>>,
) -> Result<T, DiskError> {
    match tokio::time::timeout(limit, op).await {
        Ok(result) => result,
        Err(_) => Err(DiskError::Io {
            op: "disk I/O",
            path: disk.path().to_path_buf(),
            source: io::Error::new(io::ErrorKind::TimedOut, format!("the disk did not answer within {limit:?}")),
        }),
    }
}
