import subprocess
import sys

import dflash


def test_public_names_resolve():
    from dflash import DFlashConfig, DFlashDraftModel, TargetModel, evaluate_tau, spec_generate

    assert all(
        callable(x)
        for x in (DFlashConfig, DFlashDraftModel, TargetModel, evaluate_tau, spec_generate)
    )
    assert sorted(dflash.__all__) == sorted(dflash._WHERE)
    for name in dflash.__all__:
        assert getattr(dflash, name) is not None


def test_light_modules_do_not_import_transformers():
    code = "import sys, dflash.config, dflash.metrics; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
