//! Writes the generated manifests (`config/crd/*.yaml`, `config/install.yaml`).
//! Usage: `crdgen [REPO_ROOT]` (default: the workspace root this binary was built from).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let root = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")));
    let files = match numaplane_api::manifests::generate(&root) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("crdgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (rel, content) in files {
        let path = root.join(&rel);
        if let Some(dir) = path.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            eprintln!("crdgen: creating {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
        if let Err(e) = std::fs::write(&path, content) {
            eprintln!("crdgen: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", rel.display());
    }
    ExitCode::SUCCESS
}
