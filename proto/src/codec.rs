//! The codec every voxpool service and client is generated with: prost encoding, with decode
//! failures answered INVALID_ARGUMENT instead of tonic-prost's INTERNAL.
//!
//! A request that is not valid protobuf (a string field holding invalid UTF-8, a truncated
//! field) is the caller's mistake, and the caller must be able to tell it from a server bug
//! (invariant 10 of docs/ARCHITECTURE.md: bad input is INVALID_ARGUMENT and loses nothing).

use std::marker::PhantomData;

use prost::Message;
use tonic::{
    Status,
    codec::{BufferSettings, Codec, DecodeBuf, Decoder},
};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// [`ProstCodec`] with decode errors mapped to INVALID_ARGUMENT (module doc).
#[derive(Debug, Clone)]
pub struct VoxpoolCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for VoxpoolCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for VoxpoolCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = InvalidArgumentDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        InvalidArgumentDecoder(ProstCodec::<T, U>::raw_decoder(BufferSettings::default()))
    }
}

/// A prost decoder whose failures are INVALID_ARGUMENT.
#[derive(Debug)]
pub struct InvalidArgumentDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default> Decoder for InvalidArgumentDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(buf).map_err(|status| {
            Status::invalid_argument(format!(
                "the request is not a valid {} protobuf message (string fields must hold UTF-8): {}",
                std::any::type_name::<U>()
                    .rsplit("::")
                    .next()
                    .unwrap_or("this RPC"),
                status.message()
            ))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
