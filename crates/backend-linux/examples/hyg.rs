use cordon_core::{ChildSpec, RunnerConfig, Spawner};
fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sp = Spawner::hygiene_only(RunnerConfig::default());
    for i in 0..3 {
        if i == 2 {
            eprintln!("=== MARK");
        }
        rt.block_on(async {
            let mut c = sp.spawn(&ChildSpec::new("/bin/true")).unwrap();
            c.wait().await.unwrap();
        });
    }
}
