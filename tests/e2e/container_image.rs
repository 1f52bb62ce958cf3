//! A container job whose image name is not an image reference is held
//! before anything reaches the project (docs/runner.md "Containers"):
//! podman on the volunteer's host would read `-v/:/host` as an option.

use crate::common::blah::{blah, str_value, submit, wait_final};
use crate::common::script::{script_job, ScriptWorld};
use crate::common::*;
use gahp_protocol::classad::ClassAd;
use gahp_protocol::gahp::BlahCommand;

#[test]
fn a_job_whose_image_is_an_option_is_held_naming_it() {
    let w = ScriptWorld::new("batch_window_secs = 0.5\ncontainer_runner_app = \"runner\"\n[blah.apps.runner]\ncontainer = true\n");
    let mut g = w.start();
    let iwd = w.job_dir("c1", "run.sh", "#!/bin/sh\necho ran\n", "input");
    for (dir, image) in [("home_bl_c1", "-v/:/host"), ("home_bl_c2", "oci-archive:/etc/shadow")] {
        let mut ad = script_job(&iwd, "run.sh", &[("ContainerImage", str_value(image))]);
        ad.insert("JobDirectory", str_value(dir));
        let id = submit(&mut g, ad);
        let r = wait_final(&mut g, &id, WAIT);
        assert_eq!((r[0].as_str(), r[2].as_str()), ("0", "5"), "{image}: held: {r:?}");
        let reason = ClassAd::parse(&r[3]).unwrap().get_str("HoldReason").unwrap().to_string();
        assert!(reason.contains(&format!("the container image {image:?} is not an image reference")), "{reason}");
    }
    assert!(w.sim.state()["jobs"].as_array().unwrap().is_empty(), "nothing made on the project");
    let r = blah(&mut g, BlahCommand::Ping { batch_type: "boinc".into() });
    assert_eq!(r, ["0", "No error"], "the daemon goes on");
}
