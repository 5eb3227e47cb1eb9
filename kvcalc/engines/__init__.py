"""What each serving engine does with memory and time; one subpackage per engine, engines never import each other."""
