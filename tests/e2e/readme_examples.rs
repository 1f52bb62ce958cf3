//! The TOML examples of the user guide parse with the parsers that read
//! them for real, so the documentation cannot drift from the code.

fn toml_blocks(page: &str) -> Vec<String> {
    let path = format!("{}/docs/{page}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
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
fn the_daemon_config_example_parses() {
    let blocks = toml_blocks("configuration.md");
    assert_eq!(blocks.len(), 1, "the daemon's config example");
    let daemon = gahp_services::DaemonConfig::from_toml(&blocks[0]).expect("daemon config example");
    assert_eq!(daemon.command_timeout, std::time::Duration::from_secs(270));
}

#[test]
fn the_simulated_project_examples_parse() {
    let blocks = toml_blocks("simulated-project.md");
    assert_eq!(blocks.len(), 2, "sim config, fault plan");
    let sim = boinc_sim::SimConfig::from_toml(&blocks[0]).expect("sim config example");
    assert_eq!(sim.time_scale, 60.0);
    let plan = boinc_sim::faults::FaultPlan::from_toml(&blocks[1]).expect("fault plan example");
    assert_eq!(plan.seed, 7);
}
