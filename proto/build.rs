//! Compiles every `.proto` under `proto/` into Rust with protox (a pure-Rust protobuf
//! compiler, so no system `protoc` is needed) and tonic-prost-build (messages via prost;
//! services, when a file declares one, as tonic clients and servers).

use std::io;
use std::path::{Path, PathBuf};

const PROTO_ROOT: &str = "proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Cargo watches the whole tree, so a new file (agent.proto, controller.proto) is picked up.
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    let mut files = Vec::new();
    find_protos(Path::new(PROTO_ROOT), &mut files)?;
    files.sort();

    // Well-known imports (google/protobuf/*.proto) are built into protox.
    let descriptors = protox::compile(&files, [PROTO_ROOT])?;

    tonic_prost_build::configure()
        // Maps as BTreeMap: deterministic order on the wire and in the domain types.
        .btree_map(".")
        // A run's result dwarfs a progress event; boxing it keeps the event enum small.
        .boxed(".continuum.agent.v1.RunLoadEvent.event.result")
        .build_client(true)
        .build_server(true)
        // Clients are made from a channel (`new(channel)`) that our mTLS setup builds, so no
        // `connect(url)` helper: that keeps tonic's transport out of this crate's needs.
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}

fn find_protos(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            find_protos(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "proto") {
            out.push(path);
        }
    }
    Ok(())
}
