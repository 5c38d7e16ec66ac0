// The one translation unit that compiles Asio and Beast (separate-compilation mode), so that
// everything else (the Redis store, the gateway) includes only their declarations.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
