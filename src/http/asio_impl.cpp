// The one translation unit that compiles Asio and Beast (separate-compilation mode), so that
// the rest of the http module includes only their declarations.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
