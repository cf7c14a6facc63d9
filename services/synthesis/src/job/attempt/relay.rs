//! [`Relay`]: the audio of one call on its way to its chunk (the parent module's "Where the
//! audio goes"): the first bytes sniffed before any is passed on, checked audio held while the
//! chunk is not live, handed over as it arrives once it is.

use bytes::Bytes;

use crate::job::spool::{ChunkMsg, ChunkOut, Spool};
use crate::{adapters::AudioFormat, audio};

/// The audio of one call on its way to the chunk: checked first, then held or handed over.
pub(super) struct Relay<T> {
    pub(super) out: ChunkOut<T>,
    pub(super) format: AudioFormat,
    /// First bytes not yet judged by the sniffer.
    pub(super) probe: Vec<u8>,
    pub(super) checked: bool,
    /// Checked audio waiting for the chunk to go live (or the call to succeed), spilled to
    /// disk beyond a small bound (`crate::job::spool`).
    pub(super) held: Spool,
    /// Bytes the vendor sent.
    pub(super) received: u64,
    /// Bytes handed over.
    pub(super) delivered: u64,
    /// The first bytes (a header: how long the audio is, `crate::usage::duration`).
    pub(super) head: Vec<u8>,
    /// The last bytes (an Ogg stream's last page).
    pub(super) tail: Vec<u8>,
}

/// Bytes kept at each end for [`crate::usage::duration`].
const KEPT: usize = 8 * 1024;

impl<T> Relay<T> {
    /// Takes the vendor's next bytes. Errors: the first bytes are not `format` audio.
    pub(super) fn take(&mut self, bytes: Bytes) -> Result<(), audio::AudioError> {
        self.received += bytes.len() as u64;
        if self.head.len() < KEPT {
            let n = (KEPT - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
        }
        if self.format == AudioFormat::OggOpus {
            self.tail.extend_from_slice(&bytes);
            if self.tail.len() > 2 * KEPT {
                self.tail.drain(..self.tail.len() - KEPT);
            }
        }
        if self.checked {
            self.held.push(bytes);
        } else {
            self.probe.extend_from_slice(&bytes);
            if audio::sniff_start(self.format, &self.probe)? {
                self.checked = true;
                self.held.push(Bytes::from(std::mem::take(&mut self.probe)));
            }
        }
        if *self.out.live.borrow() {
            self.hand_over();
        }
        Ok(())
    }

    /// Hands every held byte to the chunk.
    pub(super) fn hand_over(&mut self) {
        while let Some(bytes) = self.held.pop() {
            self.delivered += bytes.len() as u64;
            self.out.tx.send(ChunkMsg::Audio(bytes));
        }
    }

    /// At the call's successful end: judges bytes still unjudged (and PCM's whole length: whole
    /// 16-bit samples), hands everything over.
    pub(super) fn close(&mut self) -> Result<(), audio::AudioError> {
        if !self.checked {
            audio::sniff(self.format, &self.probe)?;
            self.checked = true;
            self.held.push(Bytes::from(std::mem::take(&mut self.probe)));
        }
        if self.format == AudioFormat::Pcm && self.received % 2 == 1 {
            return Err(audio::AudioError::NotAudio {
                format: AudioFormat::Pcm,
                reason: format!("{} bytes: not whole 16-bit samples", self.received),
            });
        }
        self.hand_over();
        Ok(())
    }
}
