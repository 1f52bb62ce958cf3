//! Arbitrary text as a ClassAd expression and as a whole ad of
//! expressions, evaluated in a match against fixed ads. Checks that
//! nothing panics or overflows the stack, that whatever parses survives
//! display -> parse unchanged, and that evaluation is deterministic.

#![no_main]

use gahp_protocol::classad::eval::{ranks, requirements_met};
use gahp_protocol::classad::expr::Expr;
use gahp_protocol::classad::{EvalAd, Env, NoFunctions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let other = EvalAd::parse(
        "[ Name = \"p\"; Apps = { \"a\", \"b\" }; Up = true; Load = [ Queued = 3 ]; \
         Requirements = MY.Up && TARGET.N < 10; Rank = -Load.Queued; Loop = Loop + 1 ]",
    )
    .expect("the fixed ad parses");

    if let Ok(e) = Expr::parse(&text) {
        let shown = e.to_string();
        assert_eq!(Expr::parse(&shown).as_ref(), Ok(&e), "display/parse mismatch: {shown:?}");
        let mut me = EvalAd::new();
        me.insert("X", e.clone());
        // Twice, each with a fresh reference budget.
        let a = format!("{:?}", Env::new(&me, &other, &NoFunctions).attr(0, "X"));
        let b = format!("{:?}", Env::new(&me, &other, &NoFunctions).attr(0, "X"));
        assert_eq!(a, b, "evaluation is not deterministic");
        let _ = Env::new(&me, &other, &NoFunctions).eval(1, &e);
    }
    if let Ok(ad) = EvalAd::parse(&text) {
        let env = Env::new(&ad, &other, &NoFunctions);
        let _ = requirements_met(&env);
        let _ = ranks(&env);
    }
});
