// A communicator that adds the wall time of every collective it runs to a clock shared by the communicators
// split from it: the step's "time in communication" (on the CPU the collectives block, so this is all of it;
// on the GPU it would be the host's enqueue time only, and the stream's events must measure instead).
#pragma once

#include <memory>

#include "moetune/parallel/communicator.h"

namespace moetune::parallel {

struct CommunicationClock {
  double seconds = 0;
};

std::unique_ptr<Communicator> timed(std::unique_ptr<Communicator> inner, std::shared_ptr<CommunicationClock> clock);

}  // namespace moetune::parallel
