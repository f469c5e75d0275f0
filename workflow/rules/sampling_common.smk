# The sampling audit's workflow functions (sampling.*; its rules are in sampling.smk).
SAMPLING = config["sampling"]


def sampling_model():
    """The model the sampling audit measures (sampling.enabled): its own, or the first Orthrus model."""
    if not SAMPLING["enabled"] or not ORTHRUS_MODELS:
        return None
    return SAMPLING["model"] or ORTHRUS_MODELS[0]


def sampling_tables():
    """The audit's tables (none when it is off): the claims read them."""
    return [f"{R}/tables/{t}" for t in contracts.SAMPLING_TABLES] if sampling_model() else []


def sampling_outputs():
    return sampling_tables() + ([f"{R}/figures/{contracts.SAMPLING_FIGURE}.{e}" for e in contracts.FIGURE_FORMATS]
                                if sampling_model() else [])
