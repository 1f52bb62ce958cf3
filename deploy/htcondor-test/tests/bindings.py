"""HTCondor's Python bindings as the pool's version ships them: 23.9 has
the version 1 module `htcondor` (and an early `htcondor2`), 25 only
version 2, `htcondor2`. The checks use version 1 where it is there, as
they always did, and version 2 where it is the only one; the two differ
where asuser.py says (JobAction's names, spool)."""
try:
    import htcondor

    V2 = False
except ImportError:
    import htcondor2 as htcondor

    V2 = True

__all__ = ["htcondor", "V2"]
