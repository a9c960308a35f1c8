// Compact rank lists for people: {0,1,2,4,5,6} -> "0-2,4-6".
#pragma once

#include <string>
#include <vector>

namespace kolo {

// `ranks` must be sorted ascending; an empty list gives "".
std::string FormatRankRanges(const std::vector<int>& ranks);

}  // namespace kolo
