//! sea-orm entities mirroring the tables the migrations create (`voxpool-migrations`).
//! The schema itself comes from the migrations, never from these entities.

pub mod reference;
pub mod revision;
pub mod voice_pack;
