//! The journal writer: one thread owns the file and commits records in groups (write every
//! queued record, one `fdatasync`, then acknowledge each), so concurrent items never wait for
//! more than one sync and a record is acknowledged only once it is durable.

use std::{
    fs::File,
    io::{self, Write},
    path::PathBuf,
    thread::JoinHandle,
};

use tokio::sync::{mpsc, oneshot};

use super::Record;

/// Most records written per sync.
const GROUP_MAX: usize = 512;

type Ack = oneshot::Sender<io::Result<()>>;

/// Appends records to the checkpoint; see the module doc.
pub struct Journal {
    tx: Option<mpsc::UnboundedSender<(Record, Ack)>>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl Journal {
    /// Starts the writer thread on an append-mode `file`.
    pub(super) fn start(file: File, path: PathBuf) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("voxctl-journal".into())
            .spawn(move || run(file, rx))
            .ok();
        Self {
            tx: Some(tx),
            thread,
            path,
        }
    }

    /// The journal's path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Appends `record`; resolves once it is on disk.
    pub async fn append(&self, record: Record) -> io::Result<()> {
        let rx = self.send(record)?;
        rx.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Appends `record` from synchronous code (not inside an async task); returns once durable.
    pub fn append_blocking(&self, record: Record) -> io::Result<()> {
        let rx = self.send(record)?;
        rx.blocking_recv().unwrap_or_else(|_| Err(stopped()))
    }

    fn send(&self, record: Record) -> io::Result<oneshot::Receiver<io::Result<()>>> {
        let (ack, rx) = oneshot::channel();
        match (&self.tx, &self.thread) {
            (Some(tx), Some(_)) => tx.send((record, ack)).map_err(|_| stopped())?,
            _ => return Err(stopped()),
        }
        Ok(rx)
    }

    /// Stops accepting records and waits until every queued one is written.
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn stopped() -> io::Error {
    io::Error::other("the checkpoint writer stopped")
}

fn run(mut file: File, mut rx: mpsc::UnboundedReceiver<(Record, Ack)>) {
    let mut buf = Vec::new();
    let mut acks = Vec::new();
    // After a failed write the file may end in a partial line: accept nothing more.
    let mut broken: Option<io::Error> = None;
    while let Some(first) = rx.blocking_recv() {
        let mut group = vec![first];
        while group.len() < GROUP_MAX {
            match rx.try_recv() {
                Ok(next) => group.push(next),
                Err(_) => break,
            }
        }
        buf.clear();
        let mut encode_errors = Vec::new();
        for (record, ack) in group {
            match serde_json::to_vec(&record) {
                Ok(line) => {
                    buf.extend_from_slice(&line);
                    buf.push(b'\n');
                    acks.push(ack);
                }
                Err(e) => encode_errors.push((ack, e)),
            }
        }
        let result = match &broken {
            Some(e) => Err(clone_err(e)),
            None => file.write_all(&buf).and_then(|()| file.sync_data()),
        };
        if let (Err(e), None) = (&result, &broken) {
            broken = Some(clone_err(e));
        }
        for ack in acks.drain(..) {
            let _ = ack.send(result.as_ref().map(|_| ()).map_err(clone_err));
        }
        for (ack, e) in encode_errors {
            let _ = ack.send(Err(io::Error::other(e)));
        }
    }
}

fn clone_err(e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), e.to_string())
}
