"""chat_en: hand-written English conversations (part D: multi-turn, creative, long-context)."""

TRANSCRIPT = r'''
[Transcript – Mobile release sync, Tuesday]

Hannah (PM): OK, let's start. Main topic is whether 4.2 ships on Thursday as planned. Omar, where are we on the crash?

Omar (Android): So the crash on launch we saw in beta is real. It's only on Android 10 and below, and only for users who had the old offline cache from version 3.x. The migration code assumes a column that didn't exist before 3.8. We've got about 6% of active Android users still on Android 10 or below, and we think maybe a third of those ever had a 3.x install. So call it two percent of Android users, give or take.

Hannah: Two percent crashing on launch is not shippable.

Omar: Agreed. The fix is small, it's a guard around the migration plus a fallback that just drops the old cache. I have a PR up. The risk is that dropping the cache means those users have to re-download their saved articles, which for some people could be a few hundred megabytes.

Lena (QA): I tested the PR this morning on two of our three old devices. It works, no crash, cache gets rebuilt. The third device, the Galaxy S9, is at the office, I'll test it tomorrow morning.

Hannah: What about iOS?

Jun (iOS): iOS is fine, no equivalent issue, because we did the migration differently there. The only open iOS thing is the dark mode contrast bug on the settings screen, which design said is cosmetic. I'd ship with it and fix in 4.2.1.

Priya (Design): Yes, it's cosmetic. The text is readable, just not quite at our contrast target. It's not an accessibility blocker in my opinion, but I'd like it in the next patch, not "someday".

Hannah: OK. So the question is the Android date. If Lena finishes the S9 test tomorrow morning and Omar's PR merges, can we still do Thursday?

Omar: The PR can merge today if Jun reviews it, he knows the migration code. Then we need a new beta build, and I'd want at least 24 hours of beta data before going to production.

Jun: I can review this afternoon.

Lena: If the build is out by tomorrow noon, 24 hours of beta puts us at Thursday noon. That's tight but possible.

Hannah: What's the rollout plan? Staged?

Omar: Yes, I'd do 10% on Thursday afternoon, watch crash-free rate overnight, then 50% Friday, 100% Monday. Not Friday evening for the full rollout, nobody wants to be on call over the weekend for this.

Marcus (Support): From the support side, can we get a heads-up text for users who lose their offline articles? We'll get tickets otherwise. Something in the release notes and maybe an in-app message after the cache rebuild.

Hannah: Good point. Priya, can you draft that in-app message? Short, friendly, explains the re-download.

Priya: Sure, by tomorrow.

Marcus: And can it say how to limit it to Wi-Fi? Some people in our markets are on metered data.

Omar: The re-download already respects the Wi-Fi-only setting if they have it enabled. The message could point them to it.

Hannah: Great. Let's also decide what happens if the S9 test fails.

Omar: Then we slip Android by a week and ship iOS alone on Thursday. The two apps don't have to release together, the backend changes are backwards-compatible.

Jun: Confirmed, the API changes are additive.

Hannah: OK. And the marketing email about the new reading mode, that's scheduled for Thursday too.

Lena: If Android slips, the email would promote a feature half our users can't get yet.

Hannah: Right. I'll talk to marketing today and ask them to move the email to next Monday regardless. Less risk. Anything else?

Marcus: One more: the FAQ page still shows screenshots from version 3. Not urgent, but people are confused.

Priya: I'll add that to the design backlog, but realistically after the release.

Hannah: Fine. Let's wrap up. Thanks everyone.
'''

CONVERSATIONS = [
[
("user", r'''
Here's a transcript from our release meeting. Summarise it: decisions, action items with owners and deadlines, and open risks.

''' + TRANSCRIPT),
("assistant", r'''
**Release sync summary (version 4.2)**

**Context**
Version 4.2 is planned for Thursday. A launch crash affects Android 10-and-below users who have the old 3.x offline cache, estimated at about 2% of Android users. iOS is unaffected apart from a cosmetic dark-mode contrast issue.

**Decisions**
1. **The Android crash blocks release.** A fix (guard the migration and drop the old cache as a fallback) will go in before shipping.
2. **iOS ships with the contrast bug**; it will be fixed in **4.2.1**, the next patch.
3. **Android staged rollout:** 10% Thursday afternoon → 50% Friday → 100% Monday. No full rollout on a Friday evening.
4. **Fallback plan:** if the Galaxy S9 test fails, Android slips by one week and **iOS ships alone on Thursday**. This is safe because the backend/API changes are additive and backwards-compatible.
5. **The marketing email for the new reading mode moves to next Monday** regardless of the outcome.

**Action items**

| owner | action | due |
|---|---|---|
| Jun | Review Omar's migration-fix PR | Today (afternoon) |
| Omar | Merge PR, produce a new beta build | Build out by tomorrow noon |
| Lena | Test the fix on the Galaxy S9 | Tomorrow morning |
| Priya | Draft in-app message explaining the offline-article re-download, pointing to the Wi-Fi-only setting | Tomorrow |
| Hannah | Ask marketing to move the reading-mode email to next Monday | Today |
| Priya | Add outdated FAQ screenshots to the design backlog | After the release |
| Jun / iOS team | Fix settings-screen dark-mode contrast | 4.2.1 |

**Open risks**
- **Tight timeline:** the build must be out by tomorrow noon to get 24 hours of beta data before Thursday noon. Any slip in review, merge or testing pushes Android.
- **S9 test still pending:** only two of three old devices have been verified.
- **Data usage:** affected users re-download their saved articles, potentially hundreds of MB, which matters for users on metered data. The in-app message is the mitigation.
- **Support load:** expect tickets from users who lose their offline articles if the messaging isn't clear.
- **Outdated FAQ screenshots** continue to confuse users until design gets to them (low priority).
'''),
],
[
("user", r'''
The four-day work week: give me the strongest arguments for and against, as fairly as you can.
'''),
("assistant", r'''
Here's my attempt at the best case on each side. Note that "four-day week" usually means **four days for the same pay and roughly 32 hours**, which is different from compressing 40 hours into four 10-hour days.

**The case for**

- **Productivity per hour often rises.** Several trials (in the UK, Iceland and elsewhere) reported that many organisations kept output roughly stable while cutting hours. People cut low-value meetings and distractions when time is scarcer.
- **Well-being and retention.** Participants consistently report less burnout and better sleep and health. Lower turnover saves real money: replacing an employee can cost a large fraction of their annual salary.
- **Recruiting advantage.** Early adopters can attract strong candidates without raising salaries.
- **Broader benefits.** More time for caregiving, education and community life; potentially less commuting and lower energy use.

**The case against**

- **Selection bias in the evidence.** The companies that volunteer for trials are those most likely to succeed: often office-based, knowledge-work firms with motivated leadership. Results may not generalise.
- **Not every job can compress.** Hospitals, schools, retail, manufacturing and customer support need coverage. Cutting hours there means hiring more people (higher costs) or reduced service.
- **Work intensification.** Squeezing the same output into fewer hours can raise stress on working days, the opposite of the intended effect.
- **Coordination costs.** If clients or partner teams work five days, someone still has to be reachable, which can create uneven workloads or staggered schedules that are hard to manage.
- **Long-term uncertainty.** Most trials last months, not years. Whether productivity gains persist once the novelty wears off is less clear.

**Where the evidence is reasonably solid:** well-being improves in almost all trials. **Where it's contested:** whether productivity holds up across industries and over the long term.

A sensible middle ground some organisations take: pilot it in teams where output is measurable, define success criteria in advance, and keep the option to revert.
'''),
],
[
("user", r'''
I have exams in 4 weeks: biology, history, maths, English lit. I'm weakest in maths. Can you help me make a study schedule? I can do about 3 hours on weekdays and 5 on weekends.
'''),
("assistant", r'''
Here's a schedule that gives maths the most time while keeping everything in rotation. It's about 25 hours a week.

**Principles behind it**
- **Maths gets ~35% of the time** and appears almost every day: maths skills fade quickly and improve with frequent practice.
- **Interleaving:** two subjects per weekday session rather than one long block; mixing subjects improves retention.
- **Active study:** past papers, practice questions and recall, not rereading notes.

**Weekly template (weeks 1–3)**

| day | session 1 (1.5 h) | session 2 (1.5 h) |
|---|---|---|
| Mon | Maths: topic review + problems | Biology: flashcards + diagrams |
| Tue | History: timeline + essay plans | Maths: problem set |
| Wed | Maths: weakest topic | English lit: quotes + themes |
| Thu | Biology: practice questions | History: source analysis |
| Fri | English lit: essay practice | Maths: mixed problems |
| Sat (5 h) | Maths past paper (2 h) + marking and corrections (1 h) | Biology (1 h), History (1 h) |
| Sun (5 h) | English lit timed essay (1.5 h) | Review week's mistakes (1.5 h), light catch-up (2 h) |

**Week 4 (exam week or the week before)**
- Full timed past papers for each subject, under exam conditions.
- After each paper, spend as long correcting it as you spent sitting it. Errors are where the marks are.
- Reduce new material; focus on consolidating.

**Maths-specific tips**
- Keep a **mistake log**: each wrong answer, why it went wrong, and the correct method. Review it every Sunday.
- Rank your maths topics red/amber/green. Spend Wednesday sessions on the reds.
- Do problems *before* re-reading the method; struggling first makes the explanation stick.

**Don't forget**
- 5–10 minute breaks every 45–50 minutes.
- Sleep: memory consolidation happens during sleep, so late-night cramming is counterproductive.
- One evening off a week. Consistent is better than heroic.

Tell me your exam dates and which maths topics you find hardest, and I can make a day-by-day version.
'''),
],
[
("user", r'''
Give me a vegetarian meal prep plan for 5 weekday lunches, with a shopping list. I have about 2 hours on Sunday.
'''),
("assistant", r'''
Here's a plan built around two main dishes plus a few components, so lunches don't get boring by Wednesday.

**The week**

| day | lunch |
|---|---|
| Mon | Chickpea & roasted veg grain bowl with lemon-tahini dressing |
| Tue | Black bean & sweet potato chilli with rice |
| Wed | Grain bowl (swap: add feta and cucumber) |
| Thu | Chilli (swap: over a baked potato or with tortilla chips) |
| Fri | "Leftover remix": remaining roasted veg, beans and grains as a wrap |

**Sunday prep (about 2 hours)**

1. **0:00** Oven to 220 °C (425 °F). Start a big pot of grains (quinoa or farro, about 2 cups dry).
2. **0:10** Chop and roast 2 trays: one of mixed veg (courgette, peppers, red onion, broccoli), one of cubed sweet potatoes (half go in the chilli). ~30–35 minutes.
3. **0:15** Start the chilli: onion, garlic, cumin, chilli powder, paprika, 2 cans black beans, 1 can chopped tomatoes, 1 cup water. Simmer 30 minutes; stir in half the roasted sweet potatoes at the end.
4. **0:20** Drain, rinse and season 2 cans of chickpeas; roast them on the veg tray for the last 15 minutes or pan-fry until crisp.
5. **0:45** Make the dressing: 3 tbsp tahini, juice of 1 lemon, 1 small garlic clove, water to thin, salt.
6. **1:00** Cook rice for the chilli days.
7. **1:15** Cool everything, portion into containers. Keep dressing separate so bowls don't go soggy.
8. **1:45** Clean up.

**Shopping list**
- *Produce:* 2 sweet potatoes, 2 courgettes, 2 bell peppers, 2 red onions, 1 head broccoli, 1 cucumber, 2 lemons, 1 garlic bulb, fresh coriander or parsley
- *Cans/dry:* 2 cans chickpeas, 2 cans black beans, 1 can chopped tomatoes, quinoa or farro, rice, tahini
- *Dairy:* feta (optional), Greek yoghurt or sour cream for the chilli (optional)
- *Spices:* cumin, chilli powder, smoked paprika, salt, pepper, olive oil
- *Extras:* tortilla wraps, tortilla chips

**Food safety:** cooked grains and beans keep about 3–4 days in the fridge. Freeze Thursday's and Friday's chilli portions on Sunday and move them to the fridge the night before.
'''),
],
[
("user", r'''
What are the main spelling differences between British and American English?
'''),
("assistant", r'''
Most differences follow a handful of patterns:

| pattern | British | American |
|---|---|---|
| -our / -or | colour, favour, neighbour | color, favor, neighbor |
| -re / -er | centre, theatre, metre | center, theater, meter |
| -ise / -ize | organise, realise (also -ize in some styles) | organize, realize |
| -yse / -yze | analyse, paralyse | analyze, paralyze |
| doubled L | travelled, cancelled, modelling | traveled, canceled, modeling |
| -ence / -ense | defence, licence (noun), offence | defense, license, offense |
| -ogue / -og | catalogue, dialogue | catalog (dialogue is common in both) |
| ae/oe → e | paediatric, oestrogen, manoeuvre | pediatric, estrogen, maneuver |

**Some individual words**
- grey / gray
- tyre / tire (on a car)
- cheque / check (for payment)
- programme / program (British uses *program* for computer programs)
- aluminium / aluminum (pronounced differently too)
- plough / plow

**A couple of subtleties**
- **-ize in British English:** Oxford spelling (used by Oxford University Press and some international organisations) uses *-ize* but keeps other British spellings: *organize, colour*. So *-ize* alone doesn't mean a text is American.
- **Practice / practise:** in British English, *practice* is the noun and *practise* the verb; American English uses *practice* for both. Same for *licence/license*.

The key thing is consistency: pick one variety for a document, and set your spell-checker to match.
'''),
],
[
("user", r'''
Write a limerick about a programmer who only tests in production.
'''),
("assistant", r'''
A coder named Dave from Dundee
Said, "Staging's a waste, can't you see?
I push it out live,
Then watch the pings dive,
And the users do QA for free!"
'''),
("user", r'''
ha. another one, about merge conflicts
'''),
("assistant", r'''
Two devs edited line forty-three,
Each certain their change was the key.
Git said, with a shrug,
"You've both got a bug,
So sort out your feelings with me."
'''),
],
[
("user", r'''
Write three haiku about the sea, traditional 5-7-5.
'''),
("assistant", r'''
**I. Morning**

Grey light on the tide,
a gull writes its one long word
across the cold wind.

**II. Afternoon**

Children chase the foam;
the sea takes back their footprints
and asks for no thanks.

**III. Night**

No moon, only sound:
the dark breathing in and out
against the harbour.

(Syllable check for the first: *Grey light on the tide* (5) / *a gull writes its one long word* (7) / *a-cross the cold wind* (5).)
'''),
],
[
("user", r'''
I want to start journaling but always give up after 3 days. Any advice, and maybe some prompts?
'''),
("assistant", r'''
Giving up after a few days usually means the habit is set up to be too demanding. A few changes make it much easier to stick with.

**Make it tiny**
- **Commit to one or two sentences a day.** That's it. Some days you'll write more, but the minimum is so small you can't fail.
- **Attach it to something you already do:** right after your morning coffee, or right before you brush your teeth at night.
- **Keep the journal where you'll see it**, open, with a pen on top. Or use a notes app on your phone if that's what you always have with you.

**Lower the bar on quality**
- No one will read it. Grammar, spelling and coherence don't matter.
- Bullet points count. A list of three things counts.

**If you miss a day, just continue.** Don't backfill or "catch up"; that turns it into homework.

**Prompts for when your mind goes blank**

*Quick daily ones*
- What's one thing that went well today, and why?
- What took more energy than it should have?
- What am I looking forward to tomorrow?
- One thing I noticed today that I'd normally overlook.

*Reflective ones, for weekends*
- What would I do differently if I relived this week?
- What's something I've been avoiding, and what's the smallest next step?
- What did I believe a year ago that I don't believe now?
- Who made my life better recently, and have I told them?
- If my energy were money, where did I spend it this week?

**After a month,** read back through it. Most people find that's the moment journaling starts to feel worth it, when you notice patterns you didn't see day to day.
'''),
],
[
("user", r'''
Are electric cars actually better? Give me the honest pros and cons.
'''),
("assistant", r'''
Honest answer: for most drivers in most places, an EV is better on running costs and emissions over its life, but there are real trade-offs depending on your situation.

**Pros**
- **Lower lifetime emissions.** Building the battery creates more emissions up front, but most lifecycle studies find EVs come out ahead over their lifetime, typically after one to a few years of driving. The cleaner your local electricity grid, the bigger the advantage.
- **Cheaper to run.** Electricity per kilometre usually costs less than petrol or diesel, especially when charging at home overnight.
- **Less maintenance.** No oil changes, far fewer moving parts, and regenerative braking means brake pads last longer.
- **Driving experience.** Quiet, smooth, instant acceleration.
- **No tailpipe emissions**, which matters for air quality in cities.

**Cons**
- **Higher purchase price** in many markets, though the gap is shrinking and incentives may help.
- **Charging access.** If you can't charge at home or work, relying on public chargers is less convenient and often more expensive.
- **Range and road trips.** Fine for daily driving, but long trips need planning around fast chargers, and charging stops take longer than refuelling.
- **Cold weather** reduces range noticeably, sometimes by 20% or more in freezing conditions, due to heating and battery chemistry.
- **Battery ageing.** Batteries lose capacity gradually. Most modern ones hold up well and come with long warranties, but replacement outside warranty is expensive.
- **Resale values** have been more volatile than for petrol cars.

**Who benefits most:** people who can charge at home, drive mostly within a daily range, and keep cars for several years.

**Who should think harder:** people without home charging, who frequently drive long distances in areas with sparse charging, or who live in very cold climates.

If you tell me your typical weekly driving, whether you have a driveway or garage, and your country, I can give you a more specific answer.
'''),
],
[
("user", r'''
How many grams is a cup of flour? Recipes disagree.
'''),
("assistant", r'''
They disagree because a "cup" is a measure of volume and flour can be packed more or less tightly. That's why bakers prefer weighing.

Typical values for **all-purpose flour**:

| method | approximate weight per US cup |
|---|---|
| Spooned into the cup and levelled (how most recipes intend it) | about 120–125 g |
| Scooped directly from the bag (packed) | about 140–150 g |
| Sifted, then spooned | about 110–115 g |

So scooping can give you over 20% more flour than the recipe expects, which is a classic cause of dry, dense cakes.

Other flours differ too: bread flour is around 125–130 g per cup, whole wheat around 120–130 g, and cake flour lighter, around 110–115 g. If the recipe gives grams, use those. If it only gives cups, spoon and level, or check whether the author says which weight they use per cup; many baking sites state it explicitly.

Also note that a US cup (about 240 ml) differs slightly from a metric cup (250 ml) used in Australia and some other countries, which adds a few more grams of uncertainty.

A kitchen scale is the easiest fix: cheap, and your results become repeatable.
'''),
],
[
("user", r'''
I'm overwhelmed at work, everything feels urgent. Someone mentioned the Eisenhower matrix?
'''),
("assistant", r'''
Yes, it's a simple tool for exactly that feeling. It sorts tasks by two questions: **Is it urgent?** (does it need attention soon?) and **Is it important?** (does it contribute to your goals or responsibilities?).

| | **Urgent** | **Not urgent** |
|---|---|---|
| **Important** | **1. Do now.** Crises, real deadlines, a production outage | **2. Schedule.** Planning, learning, relationship-building, preventing problems |
| **Not important** | **3. Delegate or minimise.** Many interruptions, some meetings and emails | **4. Drop.** Busywork, endless scrolling, low-value reports |

**How to use it today**
1. **Brain dump:** write every task on your plate, big or small.
2. **Sort each into a quadrant.** Be honest: many things feel urgent only because someone else is in a hurry.
3. **Quadrant 1:** do these first. If this list is huge, that's a sign something upstream needs fixing.
4. **Quadrant 2:** put these in your calendar as real appointments. This quadrant is where long-term improvement lives, and it's exactly what gets neglected when everything feels urgent.
5. **Quadrant 3:** delegate, batch (answer emails twice a day), or push back ("I can do this Thursday. Does that work?").
6. **Quadrant 4:** delete them, seriously.

**The key insight:** feeling overwhelmed usually means quadrant 3 is masquerading as quadrant 1. Other people's urgency isn't automatically your priority.

If your list is still too long after sorting, bring the quadrant 1 and 2 lists to your manager and ask, "These are my priorities in this order. Is that right?" It turns a vague overload into a concrete conversation about trade-offs.
'''),
],
[
("user", r'''
Can you show me the 50/30/20 budget rule with my numbers? Take-home pay is $4,200 a month.
'''),
("assistant", r'''
The 50/30/20 rule splits your **after-tax** income into three buckets:

| bucket | share | your monthly amount | what goes in it |
|---|---|---|---|
| **Needs** | 50% | **$2,100** | rent/mortgage, utilities, groceries, insurance, minimum debt payments, transport to work |
| **Wants** | 30% | **$1,260** | eating out, streaming, hobbies, travel, shopping beyond essentials |
| **Savings & debt payoff** | 20% | **$840** | emergency fund, retirement, investing, extra debt payments above the minimum |

Check: $2,100 + $1,260 + $840 = $4,200.

**How to apply it**
1. List last month's spending and put each item in a bucket. Bank apps can export this.
2. Compare with the targets. Most people find *needs* are higher than 50%, often because of housing.
3. Adjust. If needs are 60%, you might temporarily run 60/20/20 and protect savings by cutting wants.

**Priorities inside the 20% ($840)**
1. A starter emergency fund (e.g. one month of expenses, $2,100 at your needs level).
2. Any employer retirement match, since that's free money.
3. Paying down high-interest debt such as credit cards.
4. Building the emergency fund to 3–6 months of expenses.
5. Long-term investing.

**Automate it:** set up a transfer of $840 to savings on payday, so saving happens before spending.

It's a rule of thumb, not a law. In a high-cost city, 50% may be unrealistic for needs; if you're paying off debt aggressively, you might save 30% and spend less on wants. The value is in having a deliberate split at all.
'''),
],
[
("user", r'''
I loved the film Arrival. What else would I like?
'''),
("assistant", r'''
If what you loved was the thoughtful, emotional, ideas-first kind of science fiction, here are some good bets:

- **Contact (1997)**: a scientist (Jodie Foster) detects a signal from space. Like *Arrival*, it's about communication, belief and a personal story at the centre of first contact.
- **Interstellar (2014)**: big-scale space exploration driven by a parent-child relationship, with time as a central theme.
- **Annihilation (2018)**: a biologist enters a mysterious, expanding zone. Eerie, beautiful, and more about grief and self-destruction than monsters.
- **Ex Machina (2014)**: a tense, intimate film about artificial intelligence and what counts as a mind.
- **Solaris (1972)**: Andrei Tarkovsky's slow, philosophical classic about a space station orbiting a planet that confronts the crew with their memories.
- **Blade Runner 2049 (2017)**: also directed by Denis Villeneuve, with the same patient pacing and striking visuals.

And if you haven't read it: *Arrival* is based on Ted Chiang's novella **"Story of Your Life"**, in the collection *Stories of Your Life and Others*. His other stories, like those in *Exhalation*, have the same mix of big ideas and quiet emotion.

What part of *Arrival* hooked you most: the linguistics, the time structure, or the emotional core? I can narrow it down from there.
'''),
],
[
("system", r'''
You are a friendly interview coach. Ask one question at a time and give brief, specific feedback on each answer.
'''),
("user", r'''
I have an interview for a project coordinator role on Thursday. Can we practise?
'''),
("assistant", r'''
Absolutely. Let's do a short mock interview: I'll ask a question, you answer as you would in the real interview, and I'll give quick feedback before the next one.

First question, a classic opener:

**"Tell me about yourself and why you're interested in this project coordinator role."**

Aim for about 60–90 seconds: where you are now, one or two relevant experiences, and why this role is the logical next step.
'''),
("user", r'''
Um, I'm Sam, I've been working in retail for 4 years, I'm now an assistant store manager. I like organising things and I'm good with people. I want to move into an office job because retail hours are hard.
'''),
("assistant", r'''
Good start: you're clear and honest, and "assistant store manager" is a strong detail. A few tweaks will make it much more convincing:

1. **Lead with transferable skills, not the job title.** Retail management involves a lot of coordination: scheduling staff, managing stock deliveries, hitting targets. Name those.
2. **Add one concrete example.** "I'm good at organising" is a claim; a specific result is proof.
3. **Reframe the motivation.** "Retail hours are hard" is true, but it sounds like running *away* from something. Focus on what you're moving *toward*.

Here's a version using what you told me (adjust the details so they're accurate):

> "I'm Sam. For the past four years I've worked in retail, most recently as an assistant store manager, where a big part of my job is coordination: building weekly schedules for a team of 15, managing deliveries and stock counts, and making sure promotions launch on time. Last year I [example: reorganised our stock process, which cut out-of-stock complaints noticeably]. I've realised the part I enjoy most is planning and keeping many moving pieces on track, so I'm looking to make that the core of my work, which is what drew me to this project coordinator role."

Next question:

**"Tell me about a time you had to manage several priorities at once. How did you handle it?"**

Try using the STAR structure: Situation, Task, Action, Result.
'''),
],
[
("user", r'''
I need a gift idea for my dad's 60th. He likes gardening and history, budget around $100.
'''),
("assistant", r'''
Nice combination of interests. Some ideas around $100:

**Gardening**
- **A quality pair of secateurs (pruning shears)** from a reputable brand. Gardeners use them constantly, and good ones last decades.
- **A personalised garden tool set or kneeler/seat** with his initials or "Est. [birth year]".
- **A rare or heritage plant**, such as a fruit tree variety or heirloom rose, with a note about its history.

**History**
- **A book on the history of gardens or plants**: that neatly combines both interests. Books on the history of botanical exploration or famous historic gardens make good choices.
- **A membership** to a local historical society, heritage organisation or museum (often includes access to historic gardens).
- **A framed historical map** of his hometown or the area where he grew up.

**Experiences**
- **A day trip to a historic house with famous gardens**, with you along as company. Often the most appreciated gift for a milestone birthday.

**Combination idea:** seeds of heirloom vegetables that were grown in the year he was born or earlier (many seed companies describe each variety's history), in a wooden seed box with a handwritten card.

Would he prefer something practical he'll use every weekend, or something more sentimental for the 60th?
'''),
("user", r'''
More sentimental I think. He's not really into "stuff".
'''),
("assistant", r'''
Then I'd lean toward an experience or something with a story. Options:

1. **A garden visit day with you.** Pick a historic garden within driving distance, book entry tickets and lunch, and present it with a handwritten card. The real gift is the day together. Well within budget, including fuel and food.

2. **"60 years" memory jar or book.** Ask family and his friends to write short memories or messages. Collect them in a simple bound notebook or a jar. It costs little, but it's usually the gift people keep forever. Spend the budget on a nice binding or a frame for a favourite photo.

3. **Plant a tree together.** Choose a tree that suits his garden, ideally with meaning: a variety linked to where he grew up, or one that blooms around his birthday. Add a small engraved marker: "Planted for Dad's 60th, [year]". It grows with the family.

4. **A personal history project.** Get an old photo of his childhood home, street or school (local archives and historical societies often have them), and frame it with a short caption about what it looked like then. For a history lover, that kind of personal connection is special.

My pick would be combining #1 and #2: the garden trip, with the memory book given to him over lunch.
'''),
],
[
("user", r'''
Going to the beach for a week in July. Make me a packing list.
'''),
("assistant", r'''
Here's a checklist for a week at the beach in summer:

**Clothes**
- Swimsuits (2–3, so one can dry)
- Cover-up or light shirt for sun protection
- 5–7 T-shirts or tops, 2–3 shorts
- 1–2 light evening outfits
- Light sweater or jacket (evenings can be breezy)
- Underwear and socks for 7+ days
- Sleepwear
- Sandals or flip-flops, plus one pair of walking shoes

**Sun protection**
- Sunscreen (SPF 30+, water-resistant), plus SPF lip balm
- Wide-brimmed hat or cap
- Sunglasses
- After-sun or aloe gel

**Beach gear**
- Beach towels (check if the accommodation provides them)
- Beach bag, reusable water bottle
- Book or e-reader, waterproof phone pouch
- Snorkel or beach games if you use them

**Toiletries and health**
- Toothbrush, toothpaste, deodorant, shampoo
- Insect repellent
- Any prescription medication, plus painkillers, plasters and antihistamines

**Documents and tech**
- ID, bookings, cards and some cash
- Phone charger, power bank

Tip: pack a small plastic bag for wet swimsuits on the way home.
'''),
("user", r'''
Oh, I forgot to say, we're bringing our 2-year-old. What should I add?
'''),
("assistant", r'''
Good to know: toddlers need their own little list. Add these:

**Sun and water safety** (the most important part)
- Toddler sunscreen (mineral/physical, SPF 50), reapplied every 2 hours and after swimming
- Sun hat with a neck flap or chin strap, and toddler sunglasses if they'll keep them on
- UV swimsuit or rash guard with long sleeves
- Swim nappies (several per day, as they're single-use unless you bring reusable ones)
- Well-fitting life jacket or swim vest. Still keep an arm's length from them in the water; flotation aids don't replace supervision
- Pop-up beach tent or umbrella for shade and naps

**Clothes**
- Roughly twice as many outfits as days (spills, sand, water)
- Water shoes: hot sand and shells are hard on little feet
- Pyjamas and a warm layer for evenings

**Eating**
- Snacks, more than you think
- Sippy cup or bottles; keep them in the shade with a cool bag
- Bib and a few spoons

**Sleep**
- Travel cot (if the accommodation doesn't supply one) and favourite blanket or soft toy
- Portable blackout blind if they nap in a bright room

**Health**
- Children's paracetamol or ibuprofen (check dosing for their age/weight with a pharmacist), thermometer
- Nappy rash cream, wipes (lots), nappy bags

**Entertainment and comfort**
- Bucket and spade, a few small toys
- Tablet or books for the journey

**Getting there**
- Car seat if you're driving or renting a car
- Stroller that handles sand (or a carrier)

Tip for the beach itself: go in the morning and late afternoon, and spend the hottest midday hours indoors or in deep shade, which is when toddlers also tend to nap.
'''),
],
[
("user", r'''
I'm planning my daughter's 7th birthday party at home, 12 kids, 2 hours. Ideas for a plan?
'''),
("assistant", r'''
Twelve 7-year-olds for two hours is very doable with a bit of structure. The secret is having something for them to do at every moment. Here's a plan:

**0:00–0:15 Arrivals: "drop-in" activity**
Kids arrive at different times, so set up something they can join immediately: a colouring table, a "decorate your own party bag" station, or a craft (friendship bracelets, decorating a crown).

**0:15–0:50 Active games** (outside if possible)
- **Treasure hunt** with picture clues (perfect for 7-year-olds, even the ones who don't read well yet)
- **Musical statues** or musical chairs
- **Relay races:** egg-and-spoon, sack race, or carrying a balloon between their knees

**0:50–1:15 Food**
Kids this age eat surprisingly little at parties. Simple finger food: mini sandwiches, fruit, veggie sticks, popcorn, pizza slices. Water and one juice option.

**1:15–1:30 Cake and singing**
Check for allergies in advance with parents, and have a plan for any child who can't eat the cake.

**1:30–1:55 Calm activity**
- A story, a short magic show, or a themed quiz
- Or "pass the parcel" with a tiny treat in each layer

**1:55–2:00 Goodbyes and party bags**

**Tips**
- **Recruit two adult helpers.** One adult per 4–6 kids keeps things calm.
- **Plan one extra game** in case something finishes early.
- **Theme optional:** if your daughter has a current obsession (space, animals, a favourite film), it's easy to weave into the games and cake.

Do you have a budget in mind, and is there outdoor space? I can tailor the games and food.
'''),
("user", r'''
Budget around $150, we have a small backyard.
'''),
("assistant", r'''
$150 for 12 kids is workable. Here's a rough breakdown:

| item | estimated cost |
|---|---|
| Food (pizza, fruit, veggies, popcorn, drinks) | $50 |
| Cake (homemade) or a simple bakery cake | $15 homemade / $35–40 bought |
| Party bags (12 × ~$2: stickers, bubbles, a small toy, a treat) | $25 |
| Treasure hunt prizes + craft supplies | $20 |
| Decorations (balloons, a banner, paper tableware) | $15–20 |
| **Total** | **$125–155** |

**Ways to save**
- **Homemade cake** saves $20+ and kids love "decorating" cupcakes themselves; that doubles as an activity.
- **Pizza from a store's party deal**, or homemade pizzas on flatbread where each kid adds toppings (another activity).
- **Skip plastic party-bag trinkets:** give each child the bracelet or crown they made, plus one small treat.

**Small-backyard games**
- The treasure hunt works well in a small space; hide clues in the house too.
- Relay races need only a strip a few metres long.
- Bubbles: a big-bubble wand kit is cheap and keeps 7-year-olds busy for ages.
- Have an indoor backup (musical statues, pass the parcel) in case of rain.
'''),
],
[
("user", r'''
Write me a ~1200 word essay on how the printing press changed Europe. Make it readable, not academic.
'''),
("assistant", r'''
**The Machine That Multiplied Ideas: How the Printing Press Changed Europe**

Around the middle of the fifteenth century, in the German city of Mainz, a goldsmith named Johannes Gutenberg put together a machine that would change the course of European history. He didn't invent printing; people in China had printed with carved wooden blocks for centuries, and Bi Sheng had experimented with movable ceramic type in the eleventh century. In Korea, a Buddhist text known as the *Jikji* was printed with movable metal type in 1377. What Gutenberg created was a *system*: durable metal type cast in precise moulds, an oil-based ink that stuck to metal, and a press adapted from the screw presses used for wine and olive oil. Together, these made it possible to produce pages quickly, cheaply and identically.

His most famous product, the Gutenberg Bible, was finished around 1455. Scholars estimate that about 180 copies were printed. That number sounds tiny today, but it was staggering at the time. A single handwritten Bible could take a scribe many months. Suddenly, one workshop could turn out dozens of copies in the time a monastery produced one.

**An explosion of books**

The technology spread astonishingly fast. Printers trained in Mainz carried their skills to other cities, and within a few decades presses were operating across Europe, in Italy, France, the Low Countries, Spain, and England, where William Caxton set up the first press in 1476. By 1500, printing shops were active in well over two hundred European towns, and historians estimate that millions of books had been printed, the so-called *incunabula*, from the Latin word for "cradle".

Prices fell dramatically. A book that had once been a luxury object, chained to a library desk, became something a merchant, a lawyer or a prosperous craftsman might own. In Venice, the printer Aldus Manutius popularised small, portable editions of classical texts in a compact format and a new slanted typeface, the ancestor of our italics. For the first time, people could carry literature in a pocket.

**Religion and the Reformation**

The most dramatic early effect was on religion. In 1517, Martin Luther wrote his Ninety-Five Theses criticising the sale of indulgences by the Church. In an earlier age, such a protest might have remained a local dispute among scholars. Instead, printers quickly reproduced his writings, translated them from Latin into German, and sold them across the German-speaking lands. Luther turned out to be a brilliant communicator for this new medium: short, punchy pamphlets in everyday language, often with woodcut illustrations.

Printing didn't *cause* the Protestant Reformation, since there were deep political, economic and religious tensions behind it, but it changed how fast and how far the ideas could travel. Luther's German translation of the Bible also put scripture directly into the hands of ordinary readers, which encouraged literacy and gave people the means to interpret religious texts for themselves. The Catholic Church, for its part, used print too, for catechisms, devotional works, and eventually an index of prohibited books. Print became a battleground.

**Fixing language and knowledge**

A quieter but equally important change was standardisation. When every copy of a book is written by hand, errors creep in and spellings drift. Printed books were identical, so a map, a table of numbers or a legal text could be checked against the same reference everywhere. Printers, who wanted their books to sell across regions, gradually favoured certain spellings and dialects. This helped shape standard forms of languages like English, German and French.

Standard copies also changed how knowledge accumulated. Scientists could publish observations and diagrams, and readers in distant cities could study exactly the same figures. When Nicolaus Copernicus published his work on a sun-centred universe in 1543, and Andreas Vesalius published his richly illustrated book on human anatomy the same year, their ideas could be examined, criticised and built upon by people they would never meet. Errors could be corrected in the next edition instead of multiplying with each copy. The historian Elizabeth Eisenstein argued that this shift, from knowledge that decayed as it was copied to knowledge that could be preserved and improved, was one of the foundations of the Scientific Revolution.

**New jobs, new businesses, new worries**

Printing created new professions: type founders, compositors, proofreaders, booksellers and publishers. It was a business, and like any business it chased demand. Alongside serious scholarship, presses churned out almanacs, calendars, ballads, sensational news sheets and practical manuals on everything from arithmetic to cooking. Printing made information cheap, and cheap information included rumours and propaganda as well as truth.

Authorities quickly noticed the power of the press and tried to control it. Governments and churches introduced licensing, censorship and lists of banned books. Printers who published the wrong thing could face fines, prison or worse. The long struggle over who may print what, and the idea that a free press is essential to a free society, has its roots in these early conflicts.

**Reading becomes ordinary**

Perhaps the deepest change was in how people related to written words. Reading shifted, over generations, from something done mostly aloud and in groups to something many people did silently and alone. Literacy rose, unevenly and slowly, but steadily. The idea that an ordinary person might form opinions by reading, rather than only by listening to authorities, became more plausible with every cheap pamphlet and schoolbook that came off a press.

**Echoes today**

It's tempting to compare the printing press to the internet, and the comparison is useful up to a point. Both made copying almost free, both spread new ideas with dizzying speed, and both produced floods of misinformation along with knowledge. Both also triggered anxious debates about authority, truth and control.

The lesson from the fifteenth and sixteenth centuries is that the effects of a communication technology unfold over generations and are never purely good or bad. Gutenberg, who died in 1468 with little money, could not have imagined the Reformation, the Scientific Revolution or modern newspapers. He was trying to make books more efficiently. What he actually did was change who could know things, and that changed everything else.
'''),
],
[
("user", r'''
Summarise this in three bullet points for a newsletter:

"Cities are often several degrees warmer than the countryside around them, a phenomenon known as the urban heat island effect. Dark surfaces such as asphalt roads and rooftops absorb sunlight during the day and release the heat slowly at night, so city nights stay especially warm. Buildings block wind and trap heat between them, while the lack of vegetation means less cooling from the evaporation of water from leaves and soil. Waste heat from cars, air conditioners and industry adds to the problem. The consequences are more than uncomfortable: heat waves are more dangerous in cities, especially for elderly people and those without air conditioning, and higher temperatures increase electricity demand and can worsen air quality. Cities are responding by planting trees, creating parks, installing green roofs, and using lighter-coloured 'cool' materials for roofs and pavements that reflect more sunlight. Studies suggest that well-shaded streets can be noticeably cooler at street level than unshaded ones on hot days."
'''),
("assistant", r'''
- **Cities run hotter than the countryside** (the "urban heat island" effect) because dark roads and roofs soak up sunlight and release it at night, buildings trap heat and block wind, there's little vegetation to cool the air, and cars and air conditioners add waste heat.
- **It's a health and infrastructure problem, not just discomfort:** heat waves hit city residents harder, especially elderly people and those without air conditioning, while electricity demand rises and air quality can worsen.
- **Cities are fighting back** with trees, parks, green roofs and lighter "cool" roofs and pavements that reflect sunlight; shaded streets can be noticeably cooler on hot days.
'''),
],
]
