"""WL101-WL114 against the installed Warp: each rule's measured hazard and its fix, AD vs finite differences.

The cases live in ``measure_kernel_hazards.py`` (which also runs under other releases, from scratch
virtual environments, to fill in the rules' "Warp versions" sections). Here they check two things:
the static rule flags the hazard case and not the fixed one, and on the installed Warp the gradient
is wrong exactly when the rule flags the case for that version (a finding can narrow the rule's
versions: WL102's additive update is only `<1.13`).
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest
from warp_devices import DEVICES

from warp_lint.testing import lint_code

HARNESS_PATH = Path(__file__).with_name("measure_kernel_hazards.py")
_spec = importlib.util.spec_from_file_location("measure_kernel_hazards", HARNESS_PATH)
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

# case -> (rule, is the hazard)
CASES = {
    "wl101_component_accumulate": ("WL101", True),
    "wl101_component_subtract": ("WL101", True),
    "wl101_struct_field_accumulate": ("WL101", True),
    "wl101_struct_field_update": ("WL101", True),
    "wl101_struct_fields_stored": ("WL101", True),
    "wl101_control_struct_constructed": ("WL101", False),
    "wl101_control_struct_rebuilt": ("WL101", False),
    "wl102_struct_field_product": ("WL102", True),
    "wl102_read_ahead_product": ("WL102", True),
    "wl102_control_prefix_product": ("WL102", False),
    "wl102_control_read_ahead_descending": ("WL102", False),
    "wl102_copy_additive": ("WL102", True),
    "wl102_copy_scaled": ("WL102", True),
    "wl102_scaled_in_place": ("WL102", True),
    "wl103_control_diagonal_first_write": ("WL103", False),
    "wl103_diagonal_first_write_dynamic": ("WL103", True),
    "wl103_diagonal_second_write": ("WL103", True),
    "wl103_diagonal_second_write_additive": ("WL103", True),
    "wl105_struct_fields": ("WL105", True),
    "wl105_control_value_constructor": ("WL105", False),
    "wl106_double_store": ("WL106", True),
    "wl106_control_different_index": ("WL106", False),
    "wl107_func_ratio": ("WL107", True),
    "wl107_kernel_product": ("WL107", True),
    "wl107_kernel_static_loop_after": ("WL107", True),
    "wl107_control_divide_in_caller": ("WL107", False),
    "wl108_ternary_store_not_taken": ("WL108", True),
    "wl108_control_if_block": ("WL108", False),
    "wl109_where_exp": ("WL109", True),
    "wl109_control_safe_operands": ("WL109", False),
    "wl110_sqrt_dot": ("WL110", True),
    "wl110_control_length": ("WL110", False),
    "wl111_atomic_slot": ("WL111", True),
    "wl111_control_func_replay": ("WL111", False),
    "wl112_adjoint_assign": ("WL112", True),
    "wl112_control_accumulate": ("WL112", False),
    "wl113_native_no_adj": ("WL113", True),
    "wl113_control_adj_snippet": ("WL113", False),
    "wl114_grad_call": ("WL114", True),
}
VALUE_DEPENDENT = {"WL109", "WL110"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_flags_the_measured_hazard_and_not_its_fix(case):
    code, hazard = CASES[case]
    source = harness.HEADER + textwrap.dedent(harness.CASES[case]["source"])
    found = [f.code for f in lint_code(source, select=[code], target=">=0")]
    assert bool(found) == hazard, f"{case}: {found}"


@pytest.fixture(scope="module")
def warp_version():
    wp = pytest.importorskip("warp")
    pytest.importorskip("numpy")
    wp.config.quiet = True
    wp.init()
    return wp.config.version


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_installed_warp_matches_the_rules_version_claim(case, device, warp_version, tmp_path):
    code, hazard = CASES[case]
    result = harness.measure(case, harness.CASES[case], str(tmp_path), device=device)
    assert result["verdict"] != "error", result
    source = harness.HEADER + textwrap.dedent(harness.CASES[case]["source"])
    affected = bool(lint_code(source, select=[code], target=f"=={warp_version}"))
    if hazard and affected:
        expected = {"nonfinite"} if code in VALUE_DEPENDENT else {"wrong", "nonfinite"}
        assert result["verdict"] in expected, result
    else:
        assert result["verdict"] == "match", result
