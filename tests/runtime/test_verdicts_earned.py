"""Issue 15's failures, each with a small program: a verdict must be earned.

All findings of ``fixtures/earned.py`` (and the relative-import package) are confirmed in one call
per device, as ``warp-lint check --confirm`` would (one child, one build of warp-lint's copies).
"""

from __future__ import annotations

import os
import time

import pytest
from runtime_helpers import FIXTURES, flagged_line, make_finding
from warp_devices import DEVICES

from warp_lint.runtime import Reason, Status, confirm_findings
from warp_lint.runtime.generated import struct_field_param

EARNED = FIXTURES / "earned.py"
PACKAGE = FIXTURES / "relative_pkg" / "kernels.py"

# marker -> (file, kernel, code, reads, writes, options)
CASES = {
    "decay_in_place": (EARNED, "decay_in_place", "WL102", ["a", "rate"], ["a"], {}),
    "never_finite": (EARNED, "never_finite", "WL102", ["a", "rate"], ["a"], {}),
    "harmless_norm": (EARNED, "in_place_beside_norm", "WL110", ["a", "p", "q"], ["a"], {}),
    "real_in_place": (EARNED, "in_place_beside_norm", "WL102", ["a", "p", "q"], ["a"], {}),
    "horner_without_tid": (EARNED, "horner_without_tid", "WL104", ["x"], ["out"], {}),
    "hand_rolled_distance": (EARNED, "hand_rolled_distance", "WL110", ["a", "b"], ["out"], {}),
    "offset_distance": (EARNED, "offset_distance", "WL110", ["a", "b"], ["out"], {}),
    "exp_below_threshold": (EARNED, "exp_below_threshold", "WL109", ["x"], ["out"], {}),
    "constant_component": (EARNED, "constant_component", "WL103", ["vel"], ["out"], {}),
    "per_group_in_place": (EARNED, "per_group_in_place", "WL102", ["out", "x", "groups"], ["out"], {}),
    "no_backward_in_place": (EARNED, "no_backward_in_place", "WL102", ["a"], ["a"], {}),
    "subscript_annotations": (EARNED, "subscript_annotations", "WL103", ["x", "v"], ["out"], {}),
    "scaled_rows": (EARNED, "scaled_rows", "WL103", ["x"], [], {"function_kind": "func", "index_params": ["i"]}),
    "generic_scale_in_place": (EARNED, "generic_scale_in_place", "WL102", ["a"], ["a"], {}),
    "power_in_place": (EARNED, "power_in_place", "WL102", ["a"], ["a"], {}),
    "squash_vec3": (EARNED, "squash", "WL103", [], [], {"function_kind": "func"}),
    "drifting_in_place": (EARNED, "drifting_in_place", "WL102", ["a"], ["a"], {}),
    "doubled_in_place": (PACKAGE, "doubled_in_place", "WL102", ["a"], ["a"], {}),
    "first_component_write": (EARNED, "two_component_writes", "WL103", ["x"], ["out"], {}),
    "second_component_write": (EARNED, "two_component_writes", "WL103", ["x"], ["out"], {}),
    "vector_component_write": (EARNED, "vector_and_matrix_component_writes", "WL103", ["x"], ["out"], {}),
    "matrix_component_write": (EARNED, "vector_and_matrix_component_writes", "WL103", ["x"], ["out"], {}),
    "behind_enum_branch": (EARNED, "free_joints_in_place", "WL102", ["kind", "q"], ["q"], {}),
    "block_in_place": (EARNED, "block_in_place", "WL102", ["start", "f"], ["f"], {}),
    "blocks_past_the_end": (EARNED, "blocks_past_the_end", "WL102", ["start", "f"], ["f"], {}),
    "struct_horner": (EARNED, "cloth_horner", "WL104", ["c"], ["out"], {}),
    "generic_struct_by_fields": (EARNED, "cloth_energy", "WL104", ["c"], [],
                                 {"function_kind": "func", "index_params": ["i"]}),
    "generic_struct_by_callee": (EARNED, "cloth_norm", "WL110", ["c"], [],
                                 {"function_kind": "func", "index_params": ["i"]}),
    "unmade_variant": (EARNED, "clamp_y", "WL103", [], [], {"function_kind": "func"}),
    "horner_while": (EARNED, "horner_while", "WL104", ["x"], ["out"], {}),
    "horner_until": (EARNED, "horner_until", "WL104", ["x"], ["out"], {}),
    "horner_skipping": (EARNED, "horner_skipping", "WL104", ["x"], ["out"], {}),
    "factory_with_settings": (PACKAGE, "shader", "WL103", [], [], {"function_kind": "func"}),
    "component_after_loop": (EARNED, "component_after_loop", "WL103", ["x"], ["out"], {}),
    "func_writes_its_array": (EARNED, "squash_repeats", "WL102", ["values"], ["values"], {"function_kind": "func"}),
    "neighbour_overwrite": (EARNED, "neighbour_then_scale", "WL102", ["a"], ["a", "out"], {}),
    "some_neighbours_overwrite": (EARNED, "neighbour_then_scale_some", "WL102", ["a", "mode"], ["a", "out"], {}),
    "zero_in_first_thread": (EARNED, "cleared_then_squared", "WL102", ["a"], ["a", "out"], {}),
    "gated_square": (EARNED, "square_where_gated", "WL102", ["x", "mode"], ["x"], {}),
    "rare_gate_square": (EARNED, "square_past_rare_gate", "WL102", ["x", "gate"], ["x"], {}),
    "first_made_component_write": (EARNED, "two_component_writes_made", "WL103", ["x"], ["out"], {}),
    "second_made_component_write": (EARNED, "two_component_writes_made", "WL103", ["x"], ["out"], {}),
    "packed_mesh": (EARNED, "hull_extent", "WL104", [], [], {"function_kind": "func"}),
    "struct_float_field": (EARNED, "flattened_extent", "WL103", [], [], {"function_kind": "func"}),
    "held_in_closure": (EARNED, "shaper", "WL103", [], [], {"function_kind": "func"}),
    "atomic_slot": (EARNED, "compact_doubled", "WL111", ["x", "counter"], ["out"], {}),
    "return_in_while": (EARNED, "halve_unless_large", "WL104", [], [], {"function_kind": "func"}),
    "flip_elsewhere": (EARNED, "rotate_then_flip", "WL102", ["q", "f"], ["f"], {}),
    "transform_value": (EARNED, "posed_points", "WL103", ["p", "q", "v"], ["out"], {}),
    "gated_pose": (EARNED, "gated_pose", "WL103", ["p", "q", "gate"], ["out"], {}),
    "parameter_component": (EARNED, "clamped_height", "WL103", [], [], {"function_kind": "func"}),
    "first_slice": (EARNED, "overlapping_slices", "WL103", ["arr_x", "arr_y", "arr_z"], ["arr_z"], {}),
    "second_slice": (EARNED, "overlapping_slices", "WL103", ["arr_x", "arr_y", "arr_z"], ["arr_z"], {}),
    "clamped_gap": (EARNED, "clamped_gap", "WL110", ["a", "b"], ["out"], {}),
    "lopsided_gap": (EARNED, "lopsided_gap", "WL110", ["a", "b"], ["out"], {}),
    "beside_clip": (EARNED, "clipped_beside_components", "WL103", ["a", "n"], ["out"], {}),
    "inside_clip": (EARNED, "clipped_components", "WL103", ["a", "n"], ["out"], {}),
    "beside_clip_product": (EARNED, "clipped_beside_product", "WL103", ["a", "n"], ["out"], {}),
    "product_beside_clip": (EARNED, "clipped_beside_product", "WL104", ["a", "n"], ["out"], {}),
    "beside_clip_nested": (EARNED, "clipped_beside_nested_whiles", "WL103", ["a", "n"], ["out"], {}),
    "first_product_beside_clip": (EARNED, "clipped_beside_two_products", "WL104", ["a", "n"], ["out"], {}),
    "second_product_beside_clip": (EARNED, "clipped_beside_two_products", "WL104", ["a", "n"], ["out"], {}),
    "epsilon_branch": (EARNED, "level_side_feature", "WL103", ["n", "h"], ["out"], {}),
    "clipped_first_write": (EARNED, "clipped_component_writes", "WL103", ["x"], ["out"], {}),
    "clipped_second_write": (EARNED, "clipped_component_writes", "WL103", ["x"], ["out"], {}),
    "struct_array_in_place": (EARNED, "shape_scaled_in_place", "WL102", ["shapes", "a"], ["a"], {}),
    "loop_never_ran": (EARNED, "warmed_scale", "WL107", ["x"], ["out"], {}),
    "loop_ran": (EARNED, "warmed_scale_everywhere", "WL107", ["x"], ["out"], {}),
    "native_scalar": (EARNED, "scaled_by_native", "WL113", ["x"], ["out"], {}),
    "native_vector": (EARNED, "spread_by_native", "WL113", ["x"], ["out"], {}),
    "squared_before_label": (EARNED, "squared_then_labelled", "WL102", ["a", "labels"], ["a", "labels"], {}),
    "integer_label": (EARNED, "squared_then_labelled", "WL102", ["a", "labels"], ["a", "labels"], {}),
    "square_at_tie": (EARNED, "squared_at_a_tie", "WL102", ["d", "a"], ["a"], {}),
    "forward_substitution_store": (EARNED, "cholesky_solve_in_place", "WL102", ["L", "b", "x"], ["x"], {}),
    "backward_substitution_store": (EARNED, "cholesky_solve_in_place", "WL102", ["L", "b", "x"], ["x"], {}),
}


# The hidden-state native function is CPU code; draws that read past an array are set aside by a
# forked, bounds-checked probe on the CPU only (a CUDA context does not survive a fork).
# A kernel whose backward pass never ends is set aside by the same probe: on a GPU it would hang.
# Threads replay a counter's store in launch order on the CPU only.
CPU_ONLY = {"drifting_in_place", "block_in_place", "blocks_past_the_end", "return_in_while", "atomic_slot"}


@pytest.fixture(scope="module", params=DEVICES)
def verdicts(request, kernel_cache_dir):
    device = request.param
    cases = {k: v for k, v in CASES.items() if device == "cpu" or k not in CPU_ONLY}
    findings = {marker: make_finding(path, kernel, code, reads=reads, writes=writes, marker=marker, **options)
                for marker, (path, kernel, code, reads, writes, options) in cases.items()}
    confirm_findings(list(findings.values()), device=device, timeout=300, cache_dir=kernel_cache_dir)
    return {marker: finding.confirmation for marker, finding in findings.items()}


def reason(confirmation) -> str:
    return confirmation.evidence["reason_code"]


def test_non_finite_forward_is_resampled_before_anything_is_judged(verdicts):
    confirmation = verdicts["decay_in_place"]
    search = confirmation.evidence["coverage_search"]
    assert search[0]["finite"] is False  # rate in [0.5, 1.5]: log(1 - rate) is NaN for half of them
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "[0.05, 0.45]" in confirmation.evidence["input_values"]  # judged where the forward is finite


def test_never_finite_forward_is_never_confirmed(verdicts):
    confirmation = verdicts["never_finite"]
    assert confirmation.status == Status.INCONCLUSIVE
    assert reason(confirmation) == Reason.NON_FINITE


def test_one_experiment_per_finding(verdicts):
    assert verdicts["real_in_place"].status == Status.CONFIRMED
    norm = verdicts["harmless_norm"]
    assert norm.status == Status.INCONCLUSIVE, norm.reason
    # The in-place disagreement is there, but rewriting the square root does not remove it...
    assert norm.evidence["counterfactual"]["passed"] is False
    # ... and with the in-place store rewritten, the kernel agrees with the square root as written;
    # it is still not cleared: its argument never reached zero.
    assert norm.evidence["isolation"]["others_safe"]["passed"] is True
    assert reason(norm) == Reason.SINGULAR_NOT_REACHED


def test_a_confirmation_carries_its_counterfactual(verdicts):
    confirmation = verdicts["real_in_place"]
    counterfactual = confirmation.evidence["counterfactual"]
    assert counterfactual["finite"] and counterfactual["safe_form"].startswith("the store into `a` redirected")
    assert confirmation.evidence["explained_pairs"]
    assert "safe form" in confirmation.reason


@pytest.mark.parametrize("marker", ["first_component_write", "second_component_write", "vector_component_write",
                                    "matrix_component_write", "first_made_component_write",
                                    "second_made_component_write"])
def test_each_of_two_hazards_is_isolated_and_confirmed(verdicts, marker):
    confirmation = verdicts[marker]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    # Alone in its safe form it does not remove the disagreement (the other hazard stays) ...
    assert confirmation.evidence["counterfactual"]["passed"] is False
    # ... with the other one in its safe form, it does.
    assert "other flagged statements in their safe forms" in confirmation.reason
    assert confirmation.evidence["isolation"]["all_flagged_safe"]["passed"] is True


def test_kernel_without_tid_runs_one_thread(verdicts):
    confirmation = verdicts["horner_without_tid"]
    assert confirmation.evidence["launch_dim"] == [1]
    assert "one thread: the kernel never calls wp.tid()" in confirmation.evidence["domain"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


def test_sqrt_at_zero_is_driven_to_the_singular_point(verdicts):
    confirmation = verdicts["hand_rolled_distance"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert confirmation.evidence["input_values"].startswith("uniform in [0.5, 1.5], the same values in every array")
    assert confirmation.evidence["non_finite_gradient"] is True
    assert "guarded at zero" in confirmation.reason


def test_value_dependent_finding_is_not_cleared_away_from_its_singular_point(verdicts):
    confirmation = verdicts["offset_distance"]
    assert confirmation.status == Status.INCONCLUSIVE
    assert reason(confirmation) == Reason.SINGULAR_NOT_REACHED
    assert all(entry["singular"] == 0 for entry in confirmation.evidence["coverage_search"])


def test_where_overflow_is_driven_to_the_overflow(verdicts):
    confirmation = verdicts["exp_below_threshold"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "[50, 120]" in confirmation.evidence["input_values"]
    assert "if/else" in confirmation.reason


def test_all_zero_jacobian_is_not_cleared(verdicts):
    confirmation = verdicts["constant_component"]
    assert confirmation.status == Status.INCONCLUSIVE
    assert reason(confirmation) == Reason.ZERO_JACOBIAN


def test_integer_divisor_is_never_zero(verdicts):
    confirmation = verdicts["per_group_in_place"]
    assert reason(confirmation) != Reason.CRASH, confirmation.reason
    assert any(note.startswith("groups: non-zero") for note in confirmation.evidence["domain"])
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


def test_backward_disabled_gets_no_experiment(verdicts):
    confirmation = verdicts["no_backward_in_place"]
    assert confirmation.status == Status.INCONCLUSIVE
    assert reason(confirmation) == Reason.BACKWARD_DISABLED
    assert "enable_backward=False" in confirmation.reason


def test_package_module_with_relative_imports_loads(verdicts):
    confirmation = verdicts["doubled_in_place"]
    assert confirmation.evidence["imported"].startswith("as relative_pkg.kernels")
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


@pytest.mark.parametrize("marker", ["subscript_annotations", "scaled_rows"])
def test_subscript_annotations_are_understood(verdicts, marker):
    confirmation = verdicts[marker]
    assert reason(confirmation) not in (Reason.UNSUPPORTED_ARGUMENT, Reason.COMPILE_ERROR), confirmation.reason
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


def test_generic_kernel_takes_one_float_type(verdicts):
    confirmation = verdicts["generic_scale_in_place"]
    assert confirmation.evidence["instantiated_as"] == {"a": "array(dtype=float32, ndim=1)", "s": "float32"}
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


def test_kernel_made_by_a_factory_is_found(verdicts):
    confirmation = verdicts["power_in_place"]
    assert confirmation.evidence["target"]["name"] == "power_in_place"
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


def test_every_overload_of_a_func_is_found(verdicts):
    confirmation = verdicts["squash_vec3"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    lines = confirmation.evidence["target"]["lines"]
    source = EARNED.read_text().splitlines()
    assert "v: wp.vec3" in source[lines[0]]  # the second overload, not the first


def test_nondeterministic_forward_is_never_confirmed(verdicts):
    confirmation = verdicts.get("drifting_in_place")
    if confirmation is None:
        pytest.skip("the hidden-state native function is CPU code")
    assert confirmation.status == Status.INCONCLUSIVE
    assert reason(confirmation) == Reason.NONDETERMINISTIC
    assert confirmation.evidence["forward_nondeterminism"] > 0


@pytest.mark.parametrize("device", DEVICES)
def test_warm_run_hits_the_kernel_cache_with_tracking_off(tmp_path, device):
    cache = str(tmp_path / "kernels")
    finding = make_finding(EARNED, "never_finite", "WL102", reads=["a", "rate"], writes=["a"], marker="never_finite",
                           strategy=["gradcheck", "overwrite-tracking"])
    confirm_findings([finding], device=device, timeout=300, cache_dir=cache)
    cold = finding.confirmation
    assert cold.config["verify_autograd_array_access"] is False
    # Undecided, so overwrite tracking ran as its own step, by code generation only.
    assert cold.evidence["overwrite_tracking"]["ran"] is True
    assert cold.evidence["overwrite_tracking"]["warned"] is True
    built = sorted(os.listdir(os.path.join(cache, os.listdir(cache)[0])))
    started = time.perf_counter()
    confirm_findings([finding], device=device, timeout=300, cache_dir=cache)
    warm = finding.confirmation
    assert sorted(os.listdir(os.path.join(cache, os.listdir(cache)[0]))) == built  # nothing rebuilt
    assert warm.evidence["timing"]["compile_s"] < cold.evidence["timing"]["compile_s"]
    assert warm.status == cold.status and time.perf_counter() - started < 60


def test_integers_deciding_a_branch_are_drawn_at_its_constants(verdicts):
    confirmation = verdicts["behind_enum_branch"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    # Plain draws (kinds below 4) never run it; the enum member the branch compares with does.
    assert confirmation.evidence["coverage_search"][0]["hits"] == 0
    assert "integers targeted" in confirmation.evidence["input_values"]
    assert any(note.startswith("kind: in targeted draws often one of 5, 6, 7") for note in confirmation.evidence["domain"])


def test_a_draw_that_reads_past_an_array_is_set_aside_not_run(verdicts):
    if "block_in_place" not in verdicts:
        pytest.skip("the probe forks: CPU only")
    confirmation = verdicts["block_in_place"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "crashed" not in confirmation.evidence["coverage_search"][-1]


def test_a_kernel_every_draw_crashes_ends_inconclusive_and_the_child_lives_on(verdicts):
    if "blocks_past_the_end" not in verdicts:
        pytest.skip("the probe forks: CPU only")
    confirmation = verdicts["blocks_past_the_end"]
    assert confirmation.status == Status.INCONCLUSIVE
    assert reason(confirmation) == Reason.CRASH
    assert "in its probe" in confirmation.reason
    search = confirmation.evidence["coverage_search"]
    assert all(entry.get("crashed") for entry in search)
    assert max(entry.get("arrays_lengthened_to", 0) for entry in search) == 128  # longer arrays did not help
    # The findings after it in the same child were judged, not lost with a dead child.
    assert verdicts["struct_horner"].status == Status.CONFIRMED, verdicts["struct_horner"].reason


def test_struct_arguments_are_synthesized_field_by_field(verdicts):
    confirmation = verdicts["struct_horner"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "c.x" in confirmation.evidence["inputs"]
    assert confirmation.evidence["worst_pair"]["input"] == "c.x"


def test_a_generic_struct_parameter_takes_the_struct_with_the_fields_read(verdicts):
    confirmation = verdicts["generic_struct_by_fields"]
    assert confirmation.evidence["instantiated_as"] == {"c": "Cloth"}
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


def test_a_generic_parameter_takes_the_type_its_helper_declares(verdicts):
    confirmation = verdicts["generic_struct_by_callee"]
    assert confirmation.evidence["instantiated_as"] == {"c": "Cloth"}
    assert reason(confirmation) not in (Reason.UNSUPPORTED_ARGUMENT, Reason.COMPILE_ERROR), confirmation.reason


def test_a_definition_import_did_not_make_is_made_from_its_source_not_taken_for_its_namesake(verdicts):
    confirmation = verdicts["unmade_variant"]
    first, last = confirmation.evidence["target"]["lines"]
    flagged = flagged_line(EARNED, "unmade_variant")
    assert first <= flagged <= last  # the `upper` variant, not the one import made
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


@pytest.mark.parametrize("marker", ["horner_while", "horner_until", "horner_skipping"])
def test_while_loops_and_loops_with_break_or_continue_have_a_static_form(verdicts, marker):
    confirmation = verdicts[marker]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "made static" in confirmation.evidence["counterfactual"]["safe_form"]


def test_a_func_a_factory_makes_at_run_time_is_made_with_the_arguments_its_signature_offers(verdicts):
    confirmation = verdicts["factory_with_settings"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


def test_an_unflagged_dynamic_loop_is_set_aside_to_isolate_the_finding(verdicts):
    confirmation = verdicts["component_after_loop"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert confirmation.evidence["counterfactual"]["passed"] is False  # alone, the loop's disagreement stays
    assert confirmation.evidence["isolation"]["dynamic_loops_static"] is True
    assert "the kernel's dynamic loops made static" in confirmation.reason


def test_a_func_writing_the_array_it_is_given_runs_one_thread(verdicts):
    confirmation = verdicts["func_writes_its_array"]
    assert confirmation.evidence["launch_dim"] == [1]
    assert any(note.startswith("one thread: the function writes an array it is given (values)")
               for note in confirmation.evidence["domain"])
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


@pytest.mark.parametrize("marker", ["neighbour_overwrite", "some_neighbours_overwrite"])
def test_a_disagreement_that_needs_threads_sharing_elements_is_not_a_confirmation(verdicts, marker):
    confirmation = verdicts[marker]
    assert confirmation.status == Status.INCONCLUSIVE, confirmation.reason
    if confirmation.device == "cpu":  # a GPU's threads may race instead (nondeterministic)
        assert reason(confirmation) == Reason.CROSS_THREAD
        assert confirmation.evidence["one_thread"]["launch_dim"] == [1]
        assert confirmation.evidence["counterfactual"]["passed"] is True  # the multi-thread safe form agreed


def test_a_one_thread_draw_that_disagrees_confirms_on_its_own_evidence(verdicts):
    """The first thread's gate is closed (a linear write, AD right); a one-thread draw of its own
    opens it, disagrees, and the store into a new array removes the disagreement there."""
    confirmation = verdicts["gated_square"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    tried = confirmation.evidence["one_thread"]["tried"]
    assert tried[0]["inputs"] == "the first thread of the same draw"
    assert tried[0]["checked"] == "AD matches finite differences"
    assert tried[-1]["checked"].startswith("another one-thread draw disagrees")
    assert tried[-1]["counterfactual"]["passed"] is True


def test_one_thread_comparing_zeros_leaves_a_confirmation_standing(verdicts):
    confirmation = verdicts["zero_in_first_thread"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "nothing to compare" in confirmation.evidence["one_thread"]["checked"]


def test_one_thread_is_drawn_anew_where_the_first_does_not_run_the_flagged_statement(verdicts):
    record = verdicts["some_neighbours_overwrite"].evidence["one_thread"]
    last = record["tried"][-1]
    assert last["inputs"] == "a one-thread draw of its own" and last["flagged_statement_hits"] > 0
    assert last["checked"] == "AD matches finite differences"


def test_the_float_fields_of_a_struct_a_func_takes_are_differentiated(verdicts):
    confirmation = verdicts["struct_float_field"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert confirmation.evidence["worst_pair"]["input"] == struct_field_param("b", "half")
    assert "/ d b.half" in confirmation.reason  # as the user's code names it


def test_a_func_only_a_closure_still_holds_is_found(verdicts):
    confirmation = verdicts["held_in_closure"]
    first, last = confirmation.evidence["target"]["lines"]
    assert first <= flagged_line(EARNED, "held_in_closure") <= last
    assert confirmation.status == Status.CONFIRMED, confirmation.reason


def test_a_mesh_pointer_packed_into_floats_is_a_real_mesh_packed_as_the_program_packs_it(verdicts):
    confirmation = verdicts["packed_mesh"]
    assert confirmation.evidence["flagged_statement_hits"] > 0  # the branch over the mesh ran
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    inputs = confirmation.evidence["inputs"]
    assert struct_field_param("hull", "scale") in inputs
    assert struct_field_param("hull", "packed") not in inputs  # a perturbed pointer is no pointer


def test_a_slot_from_an_atomic_counter_is_confirmed_by_the_replayed_counter(verdicts):
    if "atomic_slot" not in verdicts:
        pytest.skip("threads replay the counter in launch order on the CPU only")
    confirmation = verdicts["atomic_slot"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "the atomic on `counter` made a read and store" in confirmation.evidence["counterfactual"]["safe_form"]
    assert confirmation.evidence["counterfactual"]["passed"]


def test_a_draw_whose_backward_never_ends_moves_on_to_one_thread_and_the_next_fill(verdicts):
    if "return_in_while" not in verdicts:
        pytest.skip("a backward pass that never ends is caught by a forked probe on the CPU only")
    confirmation = verdicts["return_in_while"]
    hung, *rest = confirmation.evidence["coverage_search"]
    assert hung["crashed"].startswith("no result within") and hung["launch_dim_from_now"] == [1]
    assert rest and all(entry["inputs"] != hung["inputs"] for entry in rest)
    assert confirmation.evidence["launch_dim"] == [1]
    assert confirmation.status in (Status.CONFIRMED, Status.CLEARED), confirmation.reason


def test_a_safe_form_pair_that_agrees_at_zero_explains_no_disagreement(verdicts):
    confirmation = verdicts["flip_elsewhere"]
    assert confirmation.status != Status.CONFIRMED, confirmation.reason
    shadow = {p["input"]: p for p in confirmation.evidence["counterfactual"]["pairs"]}["q"]
    assert shadow["status"] == "pass" and shadow["ad_identically_zero"] and shadow["fd_identically_zero"]
    assert "explained_pairs" not in confirmation.evidence


def test_a_transform_value_is_probed_through_its_translation(verdicts):
    confirmation = verdicts["transform_value"]
    assert confirmation.status == Status.CLEARED, confirmation.reason
    through = confirmation.evidence["derivative_through_statement"]
    assert through["measured"] and through["matters"]


@pytest.mark.parametrize("marker", ["clamped_gap", "lopsided_gap"])
def test_a_value_exactly_zero_at_the_singular_point_still_shows_a_derivative_through_it(verdicts, marker):
    # clamped_gap: the first draw clamps every thread, a later one does not; lopsided_gap: every
    # thread of every draw sits at zero.
    confirmation = verdicts[marker]
    assert confirmation.status == Status.CLEARED, confirmation.reason
    assert confirmation.evidence["singular_point_hits"] > 0
    assert confirmation.evidence["derivative_through_statement"]["matters"]


def test_a_statement_with_its_safe_forms_adjoint_is_cleared_where_the_gradient_is_wrong_elsewhere(verdicts):
    confirmation = verdicts["beside_clip"]
    assert confirmation.status == Status.CLEARED, confirmation.reason
    assert reason(confirmation) == Reason.SAME_AS_SAFE_FORM
    # The estimator's disagreement stays with the statement rewritten ...
    assert confirmation.evidence["counterfactual"]["passed"] is False
    # ... and the rewrite leaves AD as it was, while AD carries a derivative through the statement.
    assert confirmation.evidence["adjoint_change"]["kind"] == "same"
    assert confirmation.evidence["adjoint_through_statement"]["carries"] is True


def test_the_derivative_through_the_statement_is_measured_in_the_setting_compared(verdicts):
    # In the kernel as written the product's loop loses the derivative through the components; the
    # setting compared has that loop made static, and there AD carries it to the output.
    confirmation = verdicts["beside_clip_product"]
    assert confirmation.status == Status.CLEARED, confirmation.reason
    assert reason(confirmation) == Reason.SAME_AS_SAFE_FORM
    evidence = confirmation.evidence
    assert evidence["adjoint_change"]["kind"] == "same"
    assert "dynamic loops made static" in evidence["adjoint_change"]["setting"]
    through = evidence["adjoint_through_statement"]
    assert through["carries"] is True and through["setting"] == evidence["adjoint_change"]["setting"]
    # The product's own hazard is not cleared by it.
    assert verdicts["product_beside_clip"].status != Status.CLEARED, verdicts["product_beside_clip"].reason


def test_no_setting_with_every_loop_static_is_claimed_where_the_loops_could_not_be_unrolled(verdicts):
    confirmation = verdicts["beside_clip_nested"]
    assert "isolation_with_static_loops" not in confirmation.evidence, confirmation.reason
    assert "made static" not in confirmation.evidence.get("adjoint_change", {}).get("setting", "")


@pytest.mark.parametrize("marker", ["first_product_beside_clip", "second_product_beside_clip"])
def test_no_isolation_where_the_other_statements_forms_make_this_ones_loop_static(verdicts, marker):
    # Both products' safe form is their loop made static: the isolation's two kernels would be
    # one, and their sameness would clear a real hazard.
    confirmation = verdicts[marker]
    assert confirmation.status != Status.CLEARED, confirmation.reason
    assert "no longer as written" in confirmation.reason


def test_a_statement_behind_an_epsilon_test_is_reached_by_values_at_the_epsilons_scale(verdicts):
    confirmation = verdicts["epsilon_branch"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "within twice the literal 0.0001 of zero" in confirmation.evidence["input_values"]


def test_the_same_adjoint_clears_nothing_where_the_gradient_through_the_statement_is_wrong(verdicts):
    # The components feed the clamp: AD carries the estimator's derivative on from them, not the
    # function's, so the safe form could not have differed.
    confirmation = verdicts["inside_clip"]
    assert confirmation.status == Status.INCONCLUSIVE, confirmation.reason
    assert reason(confirmation) == Reason.COUNTERFACTUAL_DISAGREES
    assert confirmation.evidence["adjoint_change"]["kind"] == "same"
    assert confirmation.evidence["adjoint_through_statement"]["carries"] is False


def test_the_part_of_a_disagreement_a_statement_causes_confirms_it(verdicts):
    # The estimator's disagreement stays with both writes rewritten; with the first write in its
    # safe form, rewriting the second too takes AD most of the way to finite differences.
    confirmation = verdicts["clipped_second_write"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    change = confirmation.evidence["adjoint_change"]
    assert change["kind"] == "closer"
    assert max(move["share_removed"] for move in change["pairs"]) >= 0.1


def test_a_rewrite_that_moves_ad_away_decides_nothing(verdicts):
    # Along the directions drawn, the first write's error and the estimator's partly cancel: its
    # rewrite moves AD away from finite differences. That is no evidence either way.
    confirmation = verdicts["clipped_first_write"]
    assert confirmation.status == Status.INCONCLUSIVE, confirmation.reason
    assert confirmation.evidence["adjoint_change"]["kind"] == "other"


def test_an_array_of_structs_is_drawn_element_by_element(verdicts):
    confirmation = verdicts["struct_array_in_place"]
    if confirmation.device != "cpu":
        # Off the CPU no forked probe runs a draw first, and a zero id the kernel did use would take
        # the device down: the experiment is not run, and the verdict names the field.
        assert confirmation.status == Status.INCONCLUSIVE
        assert reason(confirmation) == Reason.UNSUPPORTED_ARGUMENT
        assert confirmation.reason.split(": ")[1].startswith("shapes.mesh")
        return
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    # The id no draw stands for is left at zero, and the evidence says so.
    assert any(note.startswith("shapes.mesh: left at zero") for note in confirmation.evidence["domain"])


def test_a_use_after_a_loop_that_never_ran_is_not_cleared(verdicts):
    never = verdicts["loop_never_ran"]
    assert never.status == Status.INCONCLUSIVE, never.reason
    assert reason(never) == Reason.NOT_EXERCISED
    assert never.evidence["feeding_loop_updates"] == 0
    assert never.evidence["flagged_statement_hits"] > 0  # the use itself ran
    # With the loop running, the stale value the use replays makes the gradient wrong.
    ran = verdicts["loop_ran"]
    assert ran.status == Status.CONFIRMED, ran.reason


@pytest.mark.parametrize("marker", ["native_scalar", "native_vector"])
def test_native_code_without_an_adjoint_is_confirmed_by_giving_it_one(verdicts, marker):
    confirmation = verdicts[marker]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    counterfactual = confirmation.evidence["counterfactual"]
    assert "given an adjoint by central differences" in counterfactual["safe_form"]
    assert counterfactual["same_forward"] and counterfactual["passed"]


def test_a_value_the_probe_cannot_scale_is_counted_in_its_own_statements_slot(verdicts):
    assert verdicts["squared_before_label"].status == Status.CONFIRMED
    label = verdicts["integer_label"]
    assert label.status == Status.INCONCLUSIVE, label.reason
    assert reason(label) == Reason.NOT_MEASURED
    assert "cannot scale" in label.reason


def test_a_plain_clear_rests_on_three_agreeing_draws_that_each_ran_the_statement(verdicts):
    # On a GPU, newton's vertex-triangle collision kernel was cleared on the one draw of nine that
    # ran its loop once; the CPU's second draw took the loop again and disagreed.
    plain = {marker: c for marker, c in verdicts.items()
             if c.status == Status.CLEARED and reason(c) == Reason.GRADIENT_MATCHES
             and "other flagged statements" not in c.reason}
    assert plain, "the fixtures clear some findings outright"
    for marker, confirmation in plain.items():
        draws = confirmation.evidence["draws"]
        assert len(draws) >= 3 and all(d["hits"] > 0 and d["passed"] for d in draws), (marker, draws)


def test_a_clear_in_a_setting_rests_on_three_draws_too(verdicts):
    # The other hazards set aside, or the statement beside its safe form: the comparison there is
    # repeated on further draws, as a plain clear's is.
    in_setting = {marker: c for marker, c in verdicts.items()
                  if c.status == Status.CLEARED and (reason(c) == Reason.SAME_AS_SAFE_FORM
                                                     or "other flagged statements" in c.reason)}
    assert in_setting, "the fixtures clear some findings in a setting"
    for marker, confirmation in in_setting.items():
        evidence = confirmation.evidence
        held = (evidence["adjoint_change"]["draws"]["unchanged"] if reason(confirmation) == Reason.SAME_AS_SAFE_FORM
                else evidence["isolation"]["draws"]["agreeing"])
        assert held >= 3, (marker, held)


def test_agreeing_draws_that_pass_nothing_through_the_statement_are_followed_by_more(verdicts):
    # The gate opens in few threads: the three draws that agree keep it shut, a later one opens it,
    # and the clear rests on it and two more of its fill beside them.
    confirmation = verdicts["gated_pose"]
    assert confirmation.status == Status.CLEARED, confirmation.reason
    assert confirmation.evidence["draws_for_a_derivative"] >= 1
    assert len(confirmation.evidence["draws"]) == 6
    assert confirmation.evidence["derivative_through_statement"]["matters"]


def test_a_clear_is_tried_on_both_sides_of_the_literals_the_kernel_compares_with(verdicts):
    # Three draws in [0.5, 1.5] keep a gate that opens past 1.499 shut and agree; the draw around
    # 1.499 opens it, disagrees, and the store into a new array removes that, with one thread too.
    confirmation = verdicts["rare_gate_square"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    draws = confirmation.evidence["draws"]
    assert [d["passed"] for d in draws] == [True, True, True, False]
    assert draws[-1]["inputs"] == "both sides of the literal 1.499"
    assert confirmation.evidence["counterfactual"]["passed"] is True
    assert confirmation.evidence["one_thread"]["tried"][-1]["inputs"] == "a one-thread draw of the fill that disagreed"
    # A kernel whose gate is harmless keeps its clear, and says where else it was tried.
    assert verdicts["gated_pose"].evidence["threshold_draws"] == ["both sides of the literal 1.4"]


def test_a_branch_only_an_exact_zero_takes_is_reached_by_drawing_zeros(verdicts):
    # `|d.x| <= 1e-6 * (|d.x| + |d.y| + |d.z|)` with the fraction a module constant: no literal
    # to aim at, and no value drawn from an interval is that small.
    confirmation = verdicts["square_at_tie"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "exactly zero" in confirmation.evidence["input_values"]


def test_a_setting_that_agrees_on_one_draw_is_compared_on_more_and_confirms_where_it_disagrees(verdicts):
    # Overlapping slice writes, warp's own test_mat_slicing_assign_backward in small: with the
    # second write in its safe form the first agrees along the first draw's random directions (it
    # was cleared on that draw alone), and disagrees along the next draw's.
    confirmation = verdicts["first_slice"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    isolation = confirmation.evidence["isolation"]
    assert isolation["others_safe"]["passed"] is True
    assert isolation["draws"]["agreeing"] < 3 and "another_draw" in isolation
    assert verdicts["second_slice"].status == Status.CONFIRMED, verdicts["second_slice"].reason


def test_a_component_write_on_a_vector_parameter_has_the_safe_form_of_a_locals(verdicts):
    # Values in [0.5, 1.5] clamp the component to zero, where nothing flows through it and AD
    # agrees; the search for a draw that passes a derivative through it goes on to other fills,
    # and the clamp lets negative values through.
    confirmation = verdicts["parameter_component"]
    assert confirmation.status == Status.CONFIRMED, confirmation.reason
    assert "draws_for_a_derivative" in confirmation.evidence
    assert confirmation.evidence["counterfactual"]["safe_form"] == "the component write on `x` rebuilt as a new value"


def test_a_loop_counting_down_still_runs_when_the_isolation_makes_loops_static(verdicts):
    # newton's dense_subs was cleared on a GPU: with every loop made static, a loop counting down
    # to -1 got no trips, and the setting compared a kernel without the statement. Measured apart
    # (one thread, float64): redirecting the backward store alone makes d x / d L agree with
    # finite differences; redirecting the forward store alone does not.
    backward = verdicts["backward_substitution_store"]
    assert backward.status == Status.CONFIRMED, backward.reason
    forward = verdicts["forward_substitution_store"]
    assert forward.status == Status.CLEARED, forward.reason
    # A clear in a setting rests on the statement reaching the outputs compared there.
    reached = forward.evidence["isolation"]["statement_reaches_outputs"]
    assert reached["carries"] and abs(reached["fd"]) > 0, reached
