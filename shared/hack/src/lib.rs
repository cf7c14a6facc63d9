//! Rule: no code, only dependencies: the union of the dependency features any member turns on
//! (dev-dependencies included), so that building or testing one package compiles shared
//! dependencies exactly as the whole workspace does and reuses them (see its `Cargo.toml`).
