//! sea-orm entities mirroring the tables the migrations create (`voxpool-migrations`).
//! The schema itself comes from the migrations, never from these entities.

pub mod clone_import;
pub mod clone_setting;
pub mod reference;
pub mod revision;
pub mod voice_clone;
pub mod voice_pack;
