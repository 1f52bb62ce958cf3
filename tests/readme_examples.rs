//! The TOML examples in the README parse with the parsers that read them
//! for real, so the documentation cannot drift from the code.

fn toml_blocks() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        match (&mut current, line.trim_start()) {
            (None, "```toml") => current = Some(String::new()),
            (Some(_), "```") => blocks.push(current.take().unwrap()),
            (Some(b), _) => {
                // The daemon's example is indented inside a list item.
                b.push_str(line.strip_prefix("   ").unwrap_or(line));
                b.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

#[test]
fn every_toml_example_in_the_readme_parses() {
    let blocks = toml_blocks();
    assert_eq!(blocks.len(), 3, "daemon config, sim config, fault plan");
    let daemon = gahp_actors::DaemonConfig::from_toml(&blocks[0]).expect("daemon config example");
    assert_eq!(daemon.command_timeout, std::time::Duration::from_secs(270));
    let sim = boinc_sim::SimConfig::from_toml(&blocks[1]).expect("sim config example");
    assert_eq!(sim.time_scale, 60.0);
    let plan = boinc_sim::faults::FaultPlan::from_toml(&blocks[2]).expect("fault plan example");
    assert_eq!(plan.seed, 7);
}
