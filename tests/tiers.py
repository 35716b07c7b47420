"""Which tests are slow: the fast tier (`python -m pytest -m "not slow"`) leaves them out, the whole suite runs them.

A test is slow when it takes seconds on the 2-core development machine: it starts a Streamlit server or a
browser, runs torchrun, runs the command line once per case, or tries hundreds of fuzzed inputs. They are
named here, by module, rather than decorated in each file, so one place says what the fast tier skips;
`@pytest.mark.slow` on a test works too. Every module keeps tests in the fast tier except the ones marked
"*" (each of their tests needs a browser or a run of the runners). Measure with
`python -m pytest -q --durations=30 tests/test_x.py` before adding a name.
"""

from __future__ import annotations

import pytest

EVERY_TEST = "*"

# module name -> the test functions in it that are slow (parametrized cases included), or EVERY_TEST
SLOW: dict[str, tuple[str, ...]] = {
    "test_app": (
        "test_command_line_paths_are_the_default_selection",
        "test_crossrank_page",
        "test_diff_page",
        "test_figure_modules_do_not_import_streamlit",
        "test_finding_links_to_its_time_range",
        "test_good_upload_becomes_a_selected_run",
        "test_opens_on_the_bundled_sample_traces",
        "test_overview_page",
        "test_timeline_page",
    ),
    "test_app_browser": (EVERY_TEST,),
    "test_app_browser_decision": (EVERY_TEST,),
    "test_app_browser_hover": (EVERY_TEST,),
    "test_app_browser_points": (EVERY_TEST,),
    "test_app_browser_points2": (EVERY_TEST,),
    "test_app_browser_safety": (
        "test_bad_uploads_and_path_escapes_show_an_error_never_a_stack_trace",
        "test_two_browsers_do_not_see_each_others_uploads",
        "test_hostile_links_render_without_errors",
        "test_menu_is_a_readers_no_deploy",
    ),
    "test_app_decision": (
        "test_diff_box_follows_the_verdict_and_reads_forward",
        "test_disagreement_is_warned_only_beyond_both_spreads",
        "test_every_command_line_run_is_selected_and_a_run_without_manifest_uses_its_traced_step",
        "test_overview_ranks_runs_by_the_runners_timing_with_price_and_fix_all",
    ),
    "test_app_harmless_syncs": (
        "test_syncs_page_and_diff_count_only_syncs_that_idled_the_gpu",
    ),
    "test_app_hover": (
        "test_bundled_runs_every_kernel_answers_at_its_middle_at_every_zoom",
    ),
    "test_app_opening": (
        "test_toolbar_is_in_viewer_mode_however_the_app_starts",
    ),
    "test_app_run": (
        "test_run_button_reproduces_a_sample",
    ),
    "test_app_safety": (
        "test_cli_output_never_carries_the_traced_environment",
        "test_app_pages_never_show_the_traced_environment",
        "test_runs_link_cannot_name_a_path",
        "test_sessions_do_not_see_each_others_uploads",
        "test_path_box_is_confined_to_the_allowed_roots",
        "test_a_config_that_turns_xsrf_off_is_overridden",
        "test_run_page_refuses_an_output_folder_holding_a_run",
    ),
    "test_app_scale": (EVERY_TEST,),
    "test_app_startup": (
        "test_evidence_is_sent_for_open_findings_only",
        "test_warm_up_fills_the_caches_the_first_session_reads",
        "test_rank_report_holds_the_reports_metrics",
        "test_overview_draws_its_first_chart_before_the_sidebar_while_the_server_loads",
        "test_sidebar_comes_first_for_runs_the_server_did_not_load",
    ),
    "test_app_tables": (
        "test_every_table_on_the_test_samples",
        "test_every_table_on_sample_runs",
    ),
    "test_app_url": (
        "test_a_link_opens_the_timeline_on_its_runs_step_and_window",
        "test_runs_follow_the_selection_and_show_in_timeline_keeps_them",
    ),
    "test_app_words": (
        "test_no_raw_numbers_on_any_page",
    ),
    "test_architecture": (
        "test_every_project_import_exists",
    ),
    "test_attribution": (
        "test_each_large_part_comes_with_a_fix_that_removes_it",
    ),
    "test_bad_inputs": (
        "test_analyze_refuses_with_one_line",
        "test_app_shows_one_error_never_a_stack_trace",
        "test_diff_refuses_with_one_line",
        "test_run_analysis_step_refuses_with_one_line",
        "test_wal_mode_export_is_read_without_a_trace_beside_it",
        "test_gzip_bomb_is_refused_with_bounded_memory",
        "test_a_good_trace_at_a_path_with_spaces_and_non_ascii_loads",
        "test_corpus_holds_every_case",
        "test_bombs_leave_no_partial_unpacked_export",
    ),
    "test_base_install": (EVERY_TEST,),
    "test_cli": (
        "test_gate_exit_codes",
        "test_table_md_csv",
        "test_collectives_section_in_every_format_and_from_the_cache",
        "test_json_output_carries_every_metric",
        "test_rank_without_comm_fails_gate_unless_allowed_and_shows_na",
        "test_bad_input_exit_3_one_line",
        "test_usage_errors_exit_2",
        "test_numpy_loads_openblas_without_server_threads_unless_the_user_says",
        "test_exit_after_command_flushes_runs_atexit_and_keeps_the_code",
    ),
    "test_cli_run": (
        "test_sweep_compares_each_workload_with_its_own_baseline",
        "test_sweep_grid_tunes_and_times_every_shape",
        "test_hung_rank_ends_the_run_within_the_timeout_and_is_named",
        "test_run_writes_traces_and_prints_analysis",
        "test_retune_searches_again_and_is_in_the_reproduce_line",
        "test_relative_out_is_the_callers_directory",
        "test_sweep_records_how_tuned_chose_its_schedule",
        "test_overwrite_replaces_only_the_earlier_runs_files",
        "test_failed_rank_exits_4_and_names_it",
        "test_abort_in_teardown_after_every_rank_finished_is_a_warning",
        "test_killed_rank_is_named_not_the_survivor",
        "test_sweep_compares_variants",
        "test_abort_before_every_rank_is_past_the_final_barrier_still_fails",
        "test_bad_grid_file_is_one_line_and_exit_3",
    ),
    "test_collectives": (
        "test_export_collectives_csv_and_html",
        "test_diff_keeps_groups_found_on_one_side_only",
    ),
    "test_crossrank": (
        "test_nsys_two_processes_share_a_clock_and_split_sendrecv_time",
    ),
    "test_diff": (
        "test_cli_diff_formats_and_errors",
        "test_ag_gemm_host_sync_vs_sync_before_loop",
        "test_cli_run_directories_with_manifest",
        "test_hta_pair_of_different_jobs",
        "test_analyze_sections_host_sync_vs_sync_before_loop",
        "test_kernels_matched_by_normalized_name_with_deltas",
        "test_difference_within_the_iteration_spread",
        "test_timeline_file_is_never_clobbered",
        "test_compare_many_for_sweep",
        "test_hidden_communication_and_time_saved_by_hand",
        "test_json_is_plain_and_complete",
        "test_findings_peer_wait_and_blocking_sync_from_other_analyses",
        "test_identical_sets_report_zero_change_and_only_identical",
        "test_different_rank_counts_and_step_numbers_are_noted",
    ),
    "test_docs": (
        "test_example_blocks_are_what_the_commands_print_now",
    ),
    "test_edges": (
        "test_cuda_runtime_syncs_still_judged",
        "test_deepep_kernels_are_communication_by_default",
        "test_findings_syncs_and_cross_rank_honour_the_selected_steps",
        "test_gate_with_nothing_selected_fails_and_recognised_comm_passes_silently",
        "test_hip_syncs_are_recognised",
        "test_like_hta_cuts_where_hta_does",
        "test_nsys_doubled_runtime_rows_are_counted_once",
        "test_sync_idle_beyond_the_span_is_flagged",
        "test_undefined_ratio_fails_the_gate_and_names_the_rule",
        "test_unknown_step_is_refused_listing_the_steps_present",
        "test_whole_window_of_steps_apart_leaves_out_the_steps_between",
    ),
    "test_exec_trace": (
        "test_fsdp_all_gathers_have_copy_in_copy_out_and_the_module_compute",
        "test_the_execution_trace_sets_the_roles_in_each_step",
        "test_whatif_et_bad_file_exit_3",
    ),
    "test_export": (
        "test_cli_svg_and_diff",
        "test_cli_writes_all_files",
        "test_cli_bad_requests",
    ),
    "test_export_browser": (EVERY_TEST,),
    "test_findings": (
        "test_fail_on_gate_catches_the_schedule_that_lost_all_overlap",
        "test_starved_comm_kernels_match_the_definition",
        "test_real_fsdp_front_loaded_fires_and_zero3_does_not",
        "test_real_nccl_all_gathers_starved_by_the_other_workers_gemm",
        "test_real_ag_gemm_nsys_pair_agrees_with_kineto",
    ),
    "test_findings_reuse": (
        "test_only_the_registered_detectors_read_the_start_shift",
    ),
    "test_fuzz": (
        "test_nsys_loader_on_mutated_fields",
        "test_nsys_loader_on_mutated_bytes",
        "test_kineto_loader_on_mutated_fields",
        "test_metrics_invariants_and_iterations_add_up",
        "test_kineto_loader_on_mutated_bytes",
    ),
    "test_fuzz_options": (
        "test_diff_options",
        "test_analyze_options",
        "test_export_options",
    ),
    "test_graph": (
        "test_replay_fidelity_on_sample_traces",
        "test_replay_fidelity_on_public_multi_rank_traces",
        "test_parts_add_up_where_the_host_chain_ends_before_the_step",
        "test_skipping_stream_runs_gives_the_same_replay",
    ),
    "test_graph_collective_waits": (
        "test_host_sync_all_gathers_wait_for_no_gemm_of_their_step",
    ),
    "test_graph_idle_waits": (
        "test_fixes_that_remove_waits_never_predict_a_slower_step",
    ),
    "test_graph_memory": (  # they share one load of fsdp/zero3 (1.3 s)
        "test_rank_graph_indices_are_int32_and_times_int64",
        "test_packed_graph_unpacks_to_the_same_graph_in_a_fraction_of_the_bytes",
        "test_set_graph_from_packed_graphs_is_the_same_and_keeps_slim_graphs",
        "test_replay_inputs_share_the_graph_arrays_until_a_fix_writes",
        "test_inputs_back_from_another_process_share_the_graph_again",
    ),
    "test_graph_pricing": (
        "test_a_free_forked_process_takes_every_other_removal",
        "test_forked_pricing_gives_the_serial_figures",
    ),
    "test_graph_run": (
        "test_graph_run_predicts_what_analyze_graph_predicts",
    ),
    "test_hostile_inputs": (
        "test_a_table_name_is_never_pasted_into_sql",
        "test_standard_output_on_a_full_disk_is_one_line",
        "test_more_jobs_than_open_files_allow_still_answer",
    ),
    "test_hostile_round3_app": (
        "test_a_run_with_a_rank_without_gpu_work_opens_on_every_page",
        "test_every_page_shows_hostile_names_as_text",
    ),
    "test_hostile_round3_browser": (EVERY_TEST,),
    "test_hostile_round3_cache": (
        "test_a_flipped_bit_in_a_report_cache_entry_is_detected",
        "test_every_flipped_bit_in_a_parse_cache_entry_is_detected",
        "test_the_unpacked_sqlite_gz_follows_the_file_no_cache_and_cache_clear",
    ),
    "test_hostile_round3_data": (
        "test_a_kernel_at_the_edge_of_int64_is_refused_not_wrapped",
        "test_a_set_moved_to_negative_time_gives_the_same_analysis",
        "test_extreme_speed_factors_are_a_usage_error",
        "test_negative_time_keeps_steps_syncs_and_the_host_sync_saving",
        "test_negative_time_through_nsys_keeps_launches_and_steps",
        "test_speed_factors_at_the_bounds_predict_without_wrapping",
    ),
    "test_hostile_round3_render": (
        "test_a_closed_stdout_is_one_line_and_a_gone_reader_a_quiet_141",
        "test_a_rank_without_gpu_work_is_analyzed_not_a_traceback",
        "test_analyze_prints_hostile_names_as_text_in_every_format",
        "test_commands_without_output_run_with_stdout_closed",
        "test_csv_outputs_neutralise_formulas",
        "test_diff_and_whatif_markdown_and_tables_hold_names_as_text",
        "test_html_report_holds_names_as_text",
        "test_json_to_a_terminal_escapes_what_the_terminal_would_run",
        "test_the_progress_bar_shows_file_names_as_text",
    ),
    "test_hostile_round3_work": (
        "test_fix_drop_pattern_that_backtracks_is_one_line_exit_2",
        "test_front_loaded_rows_of_all_windows_at_once_equal_the_window_by_window_ones",
        "test_iteration_table_equals_the_window_by_window_metrics_on_every_sample",
        "test_one_long_name_shared_by_many_nsys_rows_stays_one_string",
        "test_pool_workers_end_when_analyze_is_killed",
        "test_rules_pattern_that_backtracks_is_one_line_exit_2",
        "test_step_pattern_that_backtracks_is_one_line_exit_2",
        "test_the_same_patterns_on_names_they_match_quickly_still_work",
    ),
    "test_kernel_names": (
        "test_normalization_is_idempotent_and_never_empty",
    ),
    "test_kineto": (
        "test_mixed_runs_refused",
        "test_pretty_and_compact_json_give_the_same_trace",
    ),
    "test_kineto_formats": (
        "test_bundled_traces_use_the_by_phase_decoder",
    ),
    "test_graph_engine": (
        "test_bundled_traces_replay_as_the_reference",
        "test_overlap_shares_of_every_rank_at_once_are_each_ranks_own",
        "test_whatif_with_the_fixes_replayed_in_a_fork_is_the_serial_answer",
    ),
    "test_many_ranks_memory": (
        "test_a_real_rank_packs_to_a_tenth",
        "test_forty_ranks_are_all_replayed",
        "test_analyze_keeps_syncs_packed_with_their_section_made_in_the_worker",
    ),
    "test_no_empty_tables": (
        "test_a_run_with_order_mismatches_keeps_its_table",
        "test_a_run_without_order_mismatches_says_so_in_one_line",
    ),
    "test_nsys": (
        "test_mfu_two_ranks_sendrecv_on_compute_stream_overlap_zero",
        "test_gzipped_export_loads_like_the_plain_one",
    ),
    "test_nsys_nccl": (
        "test_binary_payloads_that_do_not_fit_their_schema_are_counted",
    ),
    "test_precision": (
        "test_copy_kernels_of_an_unselected_step_between_selected_ones_are_silent",
        "test_starved_still_fires_without_the_dependency",
        "test_starved_ignores_a_dependency_just_before_the_selected_step",
        "test_comm_slowed_of_an_unselected_step_between_selected_ones_is_silent",
        "test_sync_on_a_drained_gpu_is_a_launch_gap",
        "test_starved_ignores_a_wait_on_work_from_before_the_trace",
        "test_same_sync_inside_the_last_step_is_charged",
        "test_sync_between_iterations_still_fires",
        "test_sync_after_the_last_iteration_is_silent",
        "test_sync_on_a_busy_gpu_still_fires",
    ),
    "test_rank_select": (
        "test_cli_subset_and_bad_spec",
    ),
    "test_report_cache": (
        "test_a_hit_in_any_format_does_not_load_the_analysis_stack",
        "test_a_hit_prints_what_the_analysis_printed_without_analyzing",
        "test_anything_that_changes_the_answer_misses",
        "test_a_json_hit_does_not_load_the_analysis_stack",
        "test_every_format_is_served_by_the_one_document",
        "test_a_damaged_entry_is_removed_and_rewritten",
        "test_gates_give_the_same_verdict_on_a_hit",
        "test_the_same_files_named_otherwise_print_their_own_names",
    ),
    "test_runners": (
        "test_every_variant_on_two_cpu_processes",
        "test_three_ranks_reorder_reductions",
        "test_wrong_output_fails_the_correctness_check",
        "test_torch_profiler_writes_traces_and_manifest",
    ),
    "test_runners_thunder": (
        "test_the_rank_imports_thunder",
    ),
    "test_runners_tuning": (
        "test_tuned_run_searches_then_reuses_retunes_and_replaces_a_stale_choice",
        "test_gemm_rs_operand_exchange_is_offered_where_it_moves_less_and_passes_the_check",
    ),
    "test_seeds": (
        "test_profiled_steps_and_the_largest_launch_gaps",
        "test_the_four_switches_run_the_same_collectives",
        "test_zero2_without_bucketing_front_loads_its_gathers",
        "test_the_copy_table_of_the_bucketing_seed",
    ),
    "test_scale": (
        "test_cli_json_identical_across_executors",
        "test_unreachable_scheduler_is_one_line_exit_3",
        "test_bad_scheduler_timeout_is_one_line_exit_3",
        "test_cache_commands",
        "test_jobs_cache_and_reference_agree",
        "test_workers_keep_the_host_tables_when_the_caller_only_analyzes",
        "test_bad_file_in_a_worker_is_one_line_exit_3",
        "test_per_rank_results_are_not_reused_for_other_options",
        "test_per_rank_results_are_dropped_when_the_tables_change",
        "test_report_json_from_its_raw_document_is_the_json_of_its_plain_dict",
    ),
    "test_scale_tables": (
        "test_many_ranks_give_distributions_and_top_ranks",
        "test_few_ranks_keep_one_row_each",
    ),
    "test_shipped": (
        "test_analysis_of_shipped_traces_is_the_same_document",
    ),
    "test_syncs": (
        "test_innermost_enclosing_matches_brute_force",
        "test_stream_wait_events_in_real_traces_are_never_reported",
        "test_nsys_stream_syncs_confirmed_with_stream",
    ),
    "test_syncs_nesting": (EVERY_TEST,),
    "test_timeline_mix": (
        "test_figure_shows_both_categories_of_a_dense_lane",
    ),
    "test_whatif_cli": (
        "test_analyze_json_prices_findings_and_has_the_critical_path",
        "test_analyze_table_and_md_show_the_critical_path_and_savings",
        "test_whatif_json_predicts_the_step_without_host_syncs",
        "test_whatif_repeated_question_is_answered_from_the_report_cache",
        "test_whatif_several_fixes_and_markdown",
    ),
    "test_whatif_coalesce": (
        "test_coalesced_kernels_against_the_coalesced_ring",
    ),
    "test_whatif_serialized_streams": (
        "test_front_loaded_collectives_is_priced_by_prefetch_on_the_bundled_fsdp_set",
    ),
    "test_whatif_moves": (
        "test_moves_on_the_repository_traces",
        "test_prefetch_front_loaded_from_the_op_tree_at_dim_4096",
        "test_fsdp_pairs_at_dim_4096_meet_the_target_with_their_execution_traces",
    ),
    "test_worker_io": (
        "test_analyze_forks_its_workers_without_the_callers_own_stages",
        "test_the_caller_runs_meanwhile_once_while_its_workers_parse",
    ),
    "test_write_tables": (
        "test_cli_writes_readable_parquet",
        "test_collective_ranks_written_in_chunks_is_the_whole_merge",
        "test_document_lists_the_busiest_streams_and_the_tables_all",
    ),
}


# The modules that take longest, longest first: summed setup + call + teardown seconds per module from
# `python -m pytest -q -n 2 --dist loadfile --durations=0 -p no:randomly`, the smaller of two whole-suite runs on the
# 2-core machine while it was shared (load average 6-13, 2026-11-28): test_app_browser_points 125 s,
# test_hostile_round3_browser 121, test_cli_run 112, test_hostile_round3_render 77, test_app_browser_safety 71,
# test_report_cache 67, test_bad_inputs 67, test_fuzz 67; every module after them takes under 60 s there.
# xdist hands modules out in collection order (tests/conftest.py turns its own order by test count off), so these
# start first and the short modules fill the end: started last, one of them would keep a worker busy for minutes
# after the other had finished.
HEAVIEST_FIRST: tuple[str, ...] = (
    "test_app_browser_points", "test_hostile_round3_browser", "test_cli_run", "test_hostile_round3_render",
    "test_app_browser_safety", "test_report_cache", "test_bad_inputs", "test_fuzz", "test_hostile_round3_work",
    "test_scale", "test_app_browser_points2", "test_runners", "test_app_browser", "test_syncs_nesting", "test_cli",
    "test_app_browser_decision", "test_app", "test_app_safety", "test_whatif_moves", "test_diff",
)


def module_name(item: pytest.Item) -> str | None:
    """The test module's own name (test_x), or None for an item without a module."""
    module = getattr(item, "module", None)
    return module.__name__.rsplit(".", 1)[-1] if module is not None else None


def heaviest_first(items: list[pytest.Item]) -> None:
    """Put the modules HEAVIEST_FIRST names first, in its order; every other test keeps its place after them."""
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(module_name(item) or "", len(rank)))  # stable: order within a module kept


def mark_slow(items: list[pytest.Item]) -> None:
    """Add the `slow` marker to every collected test SLOW names."""
    for item in items:
        names = SLOW.get(module_name(item) or "", ())
        if EVERY_TEST in names or getattr(item, "originalname", item.name) in names:
            item.add_marker(pytest.mark.slow)
