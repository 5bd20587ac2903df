"""The index of oracles: every public drift, noise source, solver, metric and layer names the test that
holds its oracle, and that test exists."""

from __future__ import annotations

import ast
from pathlib import Path

import meanfield.drift.potentials
import meanfield.metrics
import meanfield.nn
import meanfield.nn.tokens
import meanfield.stepping.brownian
from meanfield.stepping.solvers import SOLVERS

TESTS = Path(__file__).parent.parent  # tests/


def _euler(f, x, dt, s_dW):
    return x + dt * f(x) + s_dW


def _heun(f, x, dt, s_dW):  # Stratonovich Heun: predictor, then the trapezoid
    pred = x + dt * f(x) + s_dW
    return x + 0.5 * dt * (f(x) + f(pred)) + s_dW


def _midpoint(f, x, dt, s_dW):
    mid = x + 0.5 * dt * f(x) + 0.5 * s_dW
    return x + dt * f(mid) + s_dW


ONE_STEP = {
    "euler": _euler,
    "torchsde_euler": _euler,
    "milstein": _euler,  # the Milstein correction σσ' vanishes for additive noise
    "euler_heun": _euler,  # ½(g(x) + g(x + g dW)) dW = σ dW for additive noise
    "heun": _heun,
    "midpoint": _midpoint,
}


BY_ORDER_TESTS = {"srk", "reversible_heun", "log_ode"}  # checked against exact GBM paths (stepping/solvers/test_euler.py)


ORACLES: dict[str, list[str]] = {
    # potentials: autograd of an independent pair-sum energy
    **{
        n: ["drift/test_potentials.py::test_drift_is_minus_the_gradient_of_M_times_the_energy"]
        for n in (
            "Quadratic",
            "DoubleWell",
            "QuadraticInteraction",
            "Alignment",
            "RadialInteraction",
            "GaussianInteraction",
        )
    },
    "Confinement": ["drift/test_potentials.py::test_drift_is_minus_the_gradient_of_M_times_the_energy"],
    "Interaction": ["drift/test_potentials.py::test_drift_is_minus_the_gradient_of_M_times_the_energy"],
    # singular kernels (self-pair left out): autograd of a dense pair energy; Dyson's Hermite-zero equilibrium
    **{
        n: [
            "drift/test_potentials.py::test_per_replica_pair_drift_is_the_gradient_of_a_dense_pair_energy",
            "drift/test_potentials.py::test_dyson_equilibrium_is_the_hermite_zeros_per_replica",
        ]
        for n in ("LogInteraction", "RieszInteraction")
    },
    "Discrete": ["metrics/test_wasserstein.py::test_a_law_from_a_sample_gives_the_two_cloud_distance"],
    # noise sources: covariance across entries, particles, steps (and the Lévy areas)
    "NoiseSource": ["stepping/test_brownian.py::test_noise_sources_are_white"],
    "GaussianNoise": [
        "stepping/test_brownian.py::test_noise_sources_are_white",
        "stepping/test_brownian.py::test_levy_areas_are_independent_of_the_increments",
    ],
    "RademacherNoise": [
        "stepping/test_brownian.py::test_noise_sources_are_white",
        "stepping/test_brownian.py::test_shared_bits_are_caught",
    ],
    "BrownianIncrements": [
        "stepping/test_brownian.py::test_noise_sources_are_white",
        "stepping/test_brownian.py::test_coarsened_increments_are_white",
    ],
    # solvers
    **{
        n: ["stepping/solvers/test_solvers.py::test_one_solver_step_equals_the_scheme_with_the_autograd_drift"]
        for n in ONE_STEP
    },
    **{
        n: [
            "stepping/solvers/test_euler.py::test_strong_order_on_gbm",
            "stepping/solvers/test_euler.py::test_every_solver_converges_to_the_ito_law_of_gbm",
        ]
        for n in BY_ORDER_TESTS
    },
    # metrics: a second implementation, a closed form or quadrature
    "w2": ["metrics/test_wasserstein.py::test_exact_matches_pot_emd2_and_linear_sum_assignment"],
    "w1": ["metrics/test_wasserstein.py::test_w2_is_the_square_root_of_w2_squared_and_w1_is_the_p1_cost"],
    "w2_squared": ["metrics/test_wasserstein.py::test_exact_matches_pot_emd2_and_linear_sum_assignment"],
    "w2_gaussian": [
        "metrics/test_wasserstein.py::test_w2_gaussian_known_cases",
        "metrics/test_wasserstein.py::test_w2_gaussian_agrees_with_large_sample_exact_ot",
    ],
    "wasserstein_to_law": ["metrics/test_wasserstein.py::test_wasserstein_to_law_matches_numerical_quadrature"],
    "Law1d": ["metrics/test_wasserstein.py::test_law_quantile_integrals_match_quadrature"],
    "Normal": ["metrics/test_wasserstein.py::test_law_quantile_integrals_match_quadrature"],
    "Uniform": ["metrics/test_wasserstein.py::test_law_quantile_integrals_match_quadrature"],
    "WassersteinResult": [
        "metrics/test_wasserstein.py::test_w2_is_the_square_root_of_w2_squared_and_w1_is_the_p1_cost"
    ],
    "METHODS": [
        "metrics/test_wasserstein.py::test_1d_unequal_sizes_and_weights_match_pot_and_exact_ot",
        "metrics/test_wasserstein.py::test_sliced_of_a_translation_is_the_mean_squared_projection",
        "metrics/test_wasserstein.py::test_sinkhorn_divergence_of_a_translation_is_exactly_the_squared_shift",
    ],
    "EXACT_MAX_POINTS": ["metrics/test_wasserstein.py::test_auto_picks_by_dimension_and_size_and_says_which"],
    "SINKHORN_MAX_POINTS": ["metrics/test_wasserstein.py::test_auto_picks_by_dimension_and_size_and_says_which"],
    "sinkhorn_divergence": [
        "metrics/test_wasserstein.py::test_sinkhorn_divergence_matches_pot_and_approaches_exact_ot",
        "drift/test_pairwise.py::test_sinkhorn_divergence_with_the_geomloss_schedule_equals_geomloss",
        "drift/test_pairwise.py::test_sinkhorn_p1_matches_pots_converged_value",
    ],
    "SinkhornResult": ["metrics/test_wasserstein.py::test_sinkhorn_divergence_matches_pot_and_approaches_exact_ot"],
    "resolve_method": ["metrics/test_wasserstein.py::test_auto_picks_by_dimension_and_size_and_says_which"],
    # entropy and KL: closed forms (Gaussians, boxes, products), quadrature (a mixture), brute-force jackknife
    "entropy": [
        "metrics/test_information.py::test_knn_gaussian_full_covariance",
        "metrics/test_information.py::test_gaussian_high_dimension",
        "metrics/test_information.py::test_uniform_box",
        "metrics/test_information.py::test_product_law",
        "metrics/test_information.py::test_mixture_by_quadrature",
        "metrics/test_information.py::test_jackknife_is_the_leave_one_out_formula",
    ],
    "gaussian_entropy_bias": [  # Monte Carlo over 20,000 Gaussian samples against the Wishart formula
        "metrics/test_information.py::test_gaussian_entropy_bias_is_the_moment_estimates_mean_error",
    ],
    "kl": [
        "metrics/test_information.py::test_kl_gaussians_two_forms",
        "metrics/test_information.py::test_jackknife_is_the_leave_one_out_formula",
    ],
    "EntropyEstimate": ["metrics/test_information.py::test_standard_errors_bracket_the_replica_sd"],
    "KLEstimate": ["metrics/test_information.py::test_standard_errors_bracket_the_replica_sd"],
    "ENTROPY_METHODS": ["metrics/test_information.py::test_gaussian_high_dimension"],
    "bsy_weights": ["metrics/test_information.py::test_bsy_weights_cancel_the_bias_terms"],
    "pairwise_cosine": ["metrics/test_diversity.py::test_pairwise_cosine_identical_orthogonal_and_known_angle"],
    "attention_similarity": ["metrics/test_diversity.py::test_attention_similarity_identical_and_disjoint_maps"],
    "mean_off_diagonal": ["metrics/test_diversity.py::test_pairwise_cosine_identical_orthogonal_and_known_angle"],
    "output_covariance": ["metrics/test_diversity.py::test_output_covariance_matches_numpy_and_known_ranks"],
    "effective_rank": ["metrics/test_diversity.py::test_effective_rank_known_values"],
    "teacher_alignment": ["metrics/test_diversity.py::test_teacher_alignment_and_aligned_fraction"],
    "aligned_fraction": ["metrics/test_diversity.py::test_teacher_alignment_and_aligned_fraction"],
    "collapse_rate": [
        "metrics/test_diversity.py::test_collapse_rate",
        "metrics/test_diversity.py::test_collapse_rate_sign_and_dead_particles",
    ],
    "teacher_coverage": ["metrics/test_diversity.py::test_aligned_fraction_blind_spot_and_coverage"],
    "live_particles": ["metrics/test_diversity.py::test_live_particles"],
    "mode_labels": ["metrics/test_diversity.py::test_distinct_modes_known_clusters_and_rule"],
    "distinct_modes": ["metrics/test_diversity.py::test_distinct_modes_known_clusters_and_rule"],
    "minibatch_gradients": ["metrics/test_diversity.py::test_minibatch_gradients_equal_the_hand_derived_gradient"],
    "gradient_variance": ["metrics/test_diversity.py::test_minibatch_gradients_equal_the_hand_derived_gradient"],
    "mean_abs_loss_change": ["metrics/test_diversity.py::test_loss_smoothness_known_values"],
    "detrended_loss_variance": ["metrics/test_diversity.py::test_loss_smoothness_known_values"],
    # layers: explicit per-head / per-neuron loops, nn.MultiheadAttention
    "ParticleLayer": ["nn/test_particles.py::test_subsample_matches_recomputing_with_those_particles"],
    "ParticleAttention": [
        "nn/test_attention.py::test_equals_multihead_attention_with_output_scaled",
        "nn/test_attention.py::test_particle_outputs_match_explicit_heads",
    ],
    "CausalParticleAttention": [
        "nn/test_attention.py::test_equals_multihead_attention_with_output_scaled",
        "nn/test_attention.py::test_causal_output_ignores_future_tokens",
    ],
    "FeatureParticles": ["nn/test_features.py::test_features_formula"],
    "TransformerLM": ["nn/test_transformer.py::test_transformer_lm_equals_an_explicit_forward"],
    "CausalSelfAttention": ["nn/test_transformer.py::test_transformer_lm_equals_an_explicit_forward"],
    "ATTENTIONS": ["nn/test_transformer.py::test_transformer_lm_equals_an_explicit_forward"],
    "ACTIVATIONS": ["nn/test_features.py::test_features_formula"],
    "SubsampleStrategy": ["nn/test_particles.py::test_strategies_return_distinct_particles_among_duplicates"],
    "SUBSAMPLE_STRATEGIES": ["nn/test_particles.py::test_strategies_return_distinct_particles_among_duplicates"],
    "Random": ["nn/test_particles.py::test_random_subsample_is_reproducible_and_uniform"],
    "Importance": ["nn/test_particles.py::test_importance_is_gradient_of_a_per_particle_mask"],
    "FarthestPoint": ["nn/test_particles.py::test_farthest_keeps_one_particle_per_cluster"],
    "Medoids": ["nn/test_particles.py::test_medoids_are_cluster_medoids_and_lower_the_quantisation_error"],
    # the free energy of particle layers: the closed form on exact Gaussian particles
    **{
        n: ["nn/test_gibbs.py::test_gaussian_particles_have_the_closed_form_free_energy"]
        for n in ("free_energy", "NetworkFreeEnergy", "LayerEntropy")
    },
    # the optimizer's noise (drift oracle: test_optim.py's independent implementation of the step)
    "Langevin": ["optim/test_langevin.py::test_optimizer_noise_is_white_across_parameters_groups_and_steps"],
    "convergence_in_m": ["studies/test_in_memory.py::test_convergence_in_m_on_midpoint_clouds_is_exact"],
    # tokens through depth: an explicit pair sum (numpy loops), the pairwise path for the Fourier one, the layer
    "SelfAttentionDynamics": [
        "nn/test_tokens.py::test_velocity_equals_an_explicit_pair_sum",
        "nn/test_tokens.py::test_fourier_path_equals_pairwise_on_the_circle",
    ],
    "attention_system": ["nn/test_tokens.py::test_bridge_layer_to_system_and_back"],
    "attention_layer": ["nn/test_tokens.py::test_bridge_layer_to_system_and_back"],
    "depth_flow": ["nn/test_tokens.py::test_depth_flow_is_the_euler_scheme_of_the_system"],
    "growth_rate": ["nn/test_tokens.py::test_growth_rate_formula"],
    "fastest_mode": ["nn/test_tokens.py::test_growth_rate_formula"],
    "fourier_modes": ["nn/test_tokens.py::test_cloud_measures"],
    "mean_inner_product": ["nn/test_tokens.py::test_cloud_measures"],
    "count_clusters": ["nn/test_tokens.py::test_cloud_measures"],
}


def _public():
    names = set(meanfield.drift.potentials.__all__) | set(meanfield.stepping.brownian.__all__) | set(SOLVERS)
    names |= set(meanfield.metrics.__all__) | set(meanfield.nn.__all__) | {"Langevin", "convergence_in_m"}
    names |= set(meanfield.nn.tokens.__all__)
    return names


def test_every_public_name_has_a_named_oracle():
    """Each public drift, noise source, solver, metric and layer names the test that holds its oracle, and
    that test exists (so that a renamed or deleted oracle test is noticed)."""
    missing = sorted(_public() - set(ORACLES))
    assert not missing, f"name an oracle test for {missing} in ORACLES"
    defined: dict[str, set[str]] = {}
    for refs in ORACLES.values():
        for ref in refs:
            file, func = ref.split("::")
            if file not in defined:
                tree = ast.parse((TESTS / file).read_text())
                defined[file] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert func in defined[file], f"{ref} does not exist"
