/* A shared library without the plugin entry point, to test the loader's error. */
int sluice_not_a_plugin(void) { return 42; }
