// The empty program of a layer's link check (cmake/EtrLayerCheck.cmake): linked with the
// whole of one layer and that layer's own link interface, it is built, never run.
int main() { return 0; }
